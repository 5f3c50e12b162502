//! Whether the disk can hold a test run. A full disk fails steps half an hour in, with
//! ENOSPC in whatever writes next (the CI of 9e01fb3 lost fuzzing and the VM tests so);
//! this says so before the first step. A run from nothing (a fresh clone, setup's cache and
//! the Go caches absent) wrote 18.5 GiB at its peak on 2026-11-27; the check asks for 20.

use std::{
    ffi::CString,
    os::unix::{ffi::OsStrExt, fs::MetadataExt},
    path::{Path, PathBuf},
};

use anyhow::{Context, bail};

use crate::proc::CACHE_ROOT;

const GIB: u64 = 1 << 30;

/// What a run writes into a clone that has built nothing yet: the test build and the fuzz
/// build took 2.5 GiB each from nothing on 2026-11-26, the release agent, the VM tests'
/// work dirs and the real node's image the rest.
const FIRST_RUN_OUTPUTS: u64 = 10 * GIB;
/// What a run writes into a clone that has built before (rebuilds of what changed, the
/// VM tests' initramfs, corpora, logs).
const RERUN_OUTPUTS: u64 = 2 * GIB;
/// What `cargo xtask setup` downloads and builds where it has not run: its cache under
/// [`CACHE_ROOT`] (Kubernetes components, images, VM kernels) held 2.6 GiB, the Go module
/// and build caches 1.6 and 4.3 GiB on 2026-11-26.
const SETUP_OUTPUTS: u64 = 10 * GIB;

/// Fails when the filesystems under `target` (the build outputs) and [`CACHE_ROOT`]
/// (setup's downloads) have less room than a run is expected to write there.
pub fn check_room(target: &Path) -> anyhow::Result<()> {
    let setup_cache = Path::new(CACHE_ROOT);
    let builds = Need {
        room: FsRoom::of(target)?,
        bytes: if has_built_the_agent(target) { RERUN_OUTPUTS } else { FIRST_RUN_OUTPUTS },
        what: "build outputs".into(),
    };
    let setup = Need {
        room: FsRoom::of(setup_cache)?,
        bytes: if setup_cache.is_dir() { 0 } else { SETUP_OUTPUTS },
        what: "setup's downloads".into(),
    };
    for need in per_filesystem(builds, setup) {
        let free_gib = need.room.free as f64 / GIB as f64;
        if need.room.free < need.bytes {
            bail!(
                "{} has {free_gib:.1} GiB free, and this run is expected to write about {} GiB there ({}). \
                 Free some space (old clones' target/ and fuzz/target/ are the usual culprits) \
                 or point CARGO_TARGET_DIR at a larger disk",
                need.room.path.display(),
                need.bytes / GIB,
                need.what,
            );
        }
        println!(
            "disk: {free_gib:.1} GiB free at {}, about {} GiB needed ({})",
            need.room.path.display(),
            need.bytes / GIB,
            need.what
        );
    }
    Ok(())
}

/// Whether the test build has run in `target` before (target/debug alone is no sign: cargo
/// builds xtask there before it runs us).
fn has_built_the_agent(target: &Path) -> bool {
    target.join("debug/volguard").is_file()
}

/// Room a run needs on one filesystem.
struct Need {
    room: FsRoom,
    bytes: u64,
    what: String,
}

/// The needs added up where they share a filesystem.
fn per_filesystem(builds: Need, setup: Need) -> Vec<Need> {
    if setup.bytes == 0 {
        vec![builds]
    } else if builds.room.device == setup.room.device {
        let what = format!("{} and {}", builds.what, setup.what);
        vec![Need { bytes: builds.bytes + setup.bytes, what, ..builds }]
    } else {
        vec![builds, setup]
    }
}

struct FsRoom {
    /// The path asked about, or its nearest existing ancestor.
    path: PathBuf,
    device: u64,
    /// Bytes an unprivileged writer may still use (root's reserve not counted).
    free: u64,
}

impl FsRoom {
    fn of(path: &Path) -> anyhow::Result<Self> {
        let existing = path.ancestors().find(|p| p.exists()).unwrap_or(Path::new("/")).to_path_buf();
        let device = std::fs::metadata(&existing).with_context(|| format!("stat {}", existing.display()))?.dev();
        let c_path = CString::new(existing.as_os_str().as_bytes()).context("a path with a NUL byte")?;
        // SAFETY: a plain C struct, for which all-zero bytes are a valid value.
        let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: c_path is NUL-terminated and the out-pointer points at a live struct.
        if unsafe { libc::statvfs(c_path.as_ptr(), &mut vfs) } != 0 {
            return Err(std::io::Error::last_os_error()).with_context(|| format!("statvfs {}", existing.display()));
        }
        Ok(Self { free: vfs.f_bavail * vfs.f_frsize, device, path: existing })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn need(device: u64, bytes: u64, what: &str) -> Need {
        Need { room: FsRoom { path: PathBuf::from("/x"), device, free: 0 }, bytes, what: what.into() }
    }

    #[test]
    fn needs_on_one_filesystem_add_up() {
        let needs = per_filesystem(need(1, 3, "builds"), need(1, 4, "setup"));
        assert_eq!(needs.len(), 1);
        assert_eq!(needs[0].bytes, 7);
        assert_eq!(needs[0].what, "builds and setup");
    }

    #[test]
    fn needs_on_two_filesystems_stay_apart() {
        let needs = per_filesystem(need(1, 3, "builds"), need(2, 4, "setup"));
        assert_eq!(needs.iter().map(|n| n.bytes).collect::<Vec<_>>(), [3, 4]);
    }

    #[test]
    fn a_done_setup_needs_nothing() {
        let needs = per_filesystem(need(1, 3, "builds"), need(1, 0, "setup"));
        assert_eq!(needs.len(), 1);
        assert_eq!((needs[0].bytes, needs[0].what.as_str()), (3, "builds"));
    }

    #[test]
    fn a_target_with_only_xtask_built_has_not_built_the_agent() {
        let target = std::env::temp_dir().join(format!("volguard-disk-test-{}", std::process::id()));
        std::fs::create_dir_all(target.join("debug")).unwrap();
        std::fs::write(target.join("debug/xtask"), b"").unwrap();
        assert!(!has_built_the_agent(&target));
        std::fs::write(target.join("debug/volguard"), b"").unwrap();
        assert!(has_built_the_agent(&target));
        std::fs::remove_dir_all(&target).unwrap();
    }

    #[test]
    fn a_path_not_made_yet_is_measured_at_its_nearest_ancestor() {
        let dir = std::env::temp_dir();
        let room = FsRoom::of(&dir.join("not-made-yet/target")).unwrap();
        assert_eq!(room.path, dir);
        assert!(room.free > 0);
    }
}

//! Proves whether the kernel really refuses through the security hooks, attached as BPF
//! LSM programs or as their fmod_ret twins ([`SecurityHooks`]).
//!
//! An LSM program can load and attach and still never run when `bpf` is missing from the
//! kernel's `lsm=` list, and an fmod_ret program can be refused (no trampolines, lockdown)
//! or its function be missing, so the only proof is a refused mount: the probe program is
//! told one throw-away source path, and a bind mount of it (in a private mount namespace)
//! must fail with EBUSY.

use std::{
    fs, io,
    path::Path,
    time::{SystemTime, UNIX_EPOCH},
};

use aya::maps::Array;
use nix::{
    errno::Errno,
    mount::{MsFlags, mount},
};
use volguard_common::{
    counters::Counter,
    lsm_probe::{DENY_ERRNO, PROBE_SOURCE_LEN, PROBE_SOURCE_MAX, ProbeSource},
    maps::LSM_PROBE_SOURCE,
};

use crate::{
    kernel::{
        btf::{Btf, VMLINUX_BTF},
        counters::Counters,
        loader::{self, LoadError, LoadedObject, SecurityHooks},
    },
    sys::mountns::{MountNsError, run_in_private_mount_ns},
};

/// The kernel's active LSM list.
pub const LSM_LIST: &str = "/sys/kernel/security/lsm";

/// What the probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LsmStatus {
    /// The probe mount was refused in the kernel: enforcement works.
    Active,
    /// The program attached but did not act; the reason says what was seen.
    Inactive { reason: String },
    /// The program could not be loaded or attached at all.
    Unavailable { reason: String },
}

/// The probe's verdict and the evidence behind it.
#[derive(Clone, Debug)]
pub struct LsmProbeReport {
    /// How the probe program was attached.
    pub via: SecurityHooks,
    pub status: LsmStatus,
    /// Times the `sb_mount` program ran during the probe.
    pub sb_mount_runs: u64,
    /// Contents of [`LSM_LIST`], when readable.
    pub lsm_list: Option<String>,
}

/// Errors that stop the probe from reaching any verdict.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("creating the probe directories under {dir} failed")]
    Scratch {
        dir: String,
        #[source]
        source: io::Error,
    },
    #[error("writing the probe source into {LSM_PROBE_SOURCE} failed")]
    Map(#[source] aya::maps::MapError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    MountNs(#[from] MountNsError),
}

/// Attaches the probe program to `object` as `via` says and tests it with one real bind
/// mount. Once per object: it takes the object's counters.
pub fn probe(object: &mut LoadedObject, via: SecurityHooks) -> Result<LsmProbeReport, ProbeError> {
    let lsm_list = fs::read_to_string(LSM_LIST).ok().map(|s| s.trim().to_owned());
    let unavailable = |reason| {
        Ok(LsmProbeReport {
            via,
            status: LsmStatus::Unavailable { reason },
            sb_mount_runs: 0,
            lsm_list: lsm_list.clone(),
        })
    };
    if let Err(e) = object.attach(&[loader::lsm_probe_hook(via)]) {
        return unavailable(error_chain(&e));
    }
    // Where fmod_ret loads at all, the other functions it attaches to must be there too.
    if via == SecurityHooks::FModRet
        && let Some(reason) = missing_security_functions()
    {
        return unavailable(reason);
    }

    let scratch = ScratchDirs::create()?;
    set_probe_source(object, Some(&scratch.source))?;
    let (source, target) = (scratch.source.clone(), scratch.target.clone());
    let mounted = run_in_private_mount_ns("volguard-probe", move || {
        mount(Some(source.as_path()), target.as_path(), None::<&str>, MsFlags::MS_BIND, None::<&str>)
    });
    set_probe_source(object, None)?;
    let mounted = mounted?;

    let counters = Counters::new(object)?;
    let runs = counters.get(Counter::LsmSbMountRuns);
    let denied = counters.get(Counter::LsmProbeDenied);
    let status = match mounted {
        Err(Errno::EBUSY) if denied > 0 => LsmStatus::Active,
        Ok(()) if runs == 0 && via == SecurityHooks::FModRet => LsmStatus::Inactive {
            reason: "the fmod_ret program on security_sb_mount attached but never ran".to_owned(),
        },
        Ok(()) if runs == 0 => LsmStatus::Inactive {
            reason: format!(
                "the sb_mount program attached but never ran: `bpf` is not in the active LSM list ({})",
                lsm_list.as_deref().unwrap_or("unreadable")
            ),
        },
        Ok(()) => LsmStatus::Inactive {
            reason: format!("the sb_mount program ran {runs} times but did not refuse the probe mount"),
        },
        Err(errno) => LsmStatus::Inactive { reason: format!("the probe bind mount failed with {errno}, not EBUSY") },
    };
    Ok(LsmProbeReport { via, status, sb_mount_runs: runs, lsm_list })
}

/// Why fmod_ret cannot carry every enforcement hook here: the `security_*` functions they
/// attach to that the kernel's BTF lacks (a kernel that inlines or renames one), or why the
/// BTF could not be read. `None` when all are there. The probe mount tests one of them;
/// this finds the others before the agent relies on them.
pub fn missing_security_functions() -> Option<String> {
    let btf = match Btf::from_file(Path::new(VMLINUX_BTF)) {
        Ok(btf) => btf,
        Err(e) => return Some(format!("reading the kernel's BTF failed: {}", error_chain(&e))),
    };
    let missing: Vec<String> = loader::enforce_hooks(SecurityHooks::FModRet)
        .into_iter()
        .filter_map(|hook| match hook.attach {
            loader::AttachPoint::FModRet { function } => Some(function),
            _ => None,
        })
        .filter(|function| !btf.has_function(function))
        .collect();
    (!missing.is_empty())
        .then(|| format!("not in the kernel's BTF as functions (inlined or renamed): {}", missing.join(", ")))
}

/// Sets (or with `None`, clears) the one source path the probe program refuses.
pub fn set_probe_source(object: &mut LoadedObject, source: Option<&Path>) -> Result<(), ProbeError> {
    let mut value = ProbeSource { len: 0, _pad: 0, path: [0; PROBE_SOURCE_LEN] };
    if let Some(source) = source {
        let bytes = source.as_os_str().as_encoded_bytes();
        if bytes.len() > PROBE_SOURCE_MAX {
            return Err(ProbeError::Scratch {
                dir: source.display().to_string(),
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("probe path longer than {PROBE_SOURCE_MAX} bytes"),
                ),
            });
        }
        value.path[..bytes.len()].copy_from_slice(bytes);
        value.len = bytes.len() as u32;
    }
    let map = object.ebpf.map_mut(LSM_PROBE_SOURCE).ok_or(LoadError::MissingMap { map: LSM_PROBE_SOURCE })?;
    let mut array: Array<_, ProbeSource> = Array::try_from(map).map_err(ProbeError::Map)?;
    array.set(0, value, 0).map_err(ProbeError::Map)
}

/// The errno the probe expects for a refused mount.
pub const DENIED: Errno = Errno::EBUSY;
const _: () = assert!(DENIED as i32 == DENY_ERRNO);

/// `source` and `target` directories for the probe mount, removed on drop.
struct ScratchDirs {
    root: std::path::PathBuf,
    source: std::path::PathBuf,
    target: std::path::PathBuf,
}

impl ScratchDirs {
    fn create() -> Result<Self, ProbeError> {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let root = std::env::temp_dir().join(format!("volguard-lsm-probe-{}-{nanos}", std::process::id()));
        let source = root.join("source");
        let target = root.join("target");
        for dir in [&source, &target] {
            fs::create_dir_all(dir).map_err(|source| ProbeError::Scratch { dir: dir.display().to_string(), source })?;
        }
        Ok(Self { root, source, target })
    }
}

impl Drop for ScratchDirs {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// `outer: inner: innermost`, for one-line reasons: a cause the text already says is not
/// repeated, and aya's empty "Verifier output:" (the kernel refused before verifying) is
/// left out.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = String::new();
    let mut next = Some(e);
    while let Some(error) = next {
        let part = error.to_string();
        let part = part.trim_end();
        let part = part.strip_suffix("Verifier output:").map_or(part, |p| p.trim_end_matches(['.', ' ']));
        if !part.is_empty() && !text.contains(part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(part);
        }
        next = error.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("sb_mount_probe: load failed")]
    struct Outer(#[source] Middle);

    #[derive(Debug, thiserror::Error)]
    #[error("the BPF_PROG_LOAD syscall returned {0}. Verifier output: ")]
    struct Middle(#[source] io::Error);

    /// This host's kernel has every `security_*` function the fmod_ret programs attach to
    /// (each VM boot's fmod_ret probe checks its kernel the same way).
    #[test]
    fn every_security_function_the_fmod_ret_programs_attach_to_is_in_this_kernels_btf() {
        assert_eq!(missing_security_functions(), None);
    }

    #[test]
    fn the_reason_says_each_cause_once_without_an_empty_verifier_log() {
        let e = Outer(Middle(io::Error::from_raw_os_error(1)));
        assert_eq!(
            error_chain(&e),
            "sb_mount_probe: load failed: the BPF_PROG_LOAD syscall returned Operation not permitted (os error 1)"
        );
    }
}

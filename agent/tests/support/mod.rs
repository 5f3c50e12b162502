//! Helpers shared by the tests that load real eBPF programs.
#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::{fs, os::unix::fs::MetadataExt, path::PathBuf, time::Duration};

use volguard::{
    bpf::reader::EventReader,
    decode::{Event, Mount},
};

/// Set by `cargo xtask test`: a root test may not skip itself.
const REQUIRE_ROOT: &str = "VOLGUARD_REQUIRE_ROOT_TESTS";

/// True when running as root. Otherwise says why the test is skipped, or fails it when
/// the harness demands that no root test be skipped.
pub fn have_root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var_os(REQUIRE_ROOT).is_none(),
        "{test}: needs root but {REQUIRE_ROOT} is set"
    );
    eprintln!(
        "SKIPPED {test}: needs root (loads eBPF programs, makes mounts); run `cargo xtask test` as root"
    );
    false
}

/// The cgroup v2 id (inode of the cgroup directory) of this process.
pub fn own_cgroup_id() -> u64 {
    let cgroups = fs::read_to_string("/proc/self/cgroup").unwrap();
    let path = cgroups
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .expect("a cgroup v2 line in /proc/self/cgroup");
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let root = mountinfo
        .lines()
        .find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            right
                .starts_with("cgroup2 ")
                .then(|| left.split(' ').nth(4).map(PathBuf::from))
                .flatten()
        })
        .expect("cgroup2 mounted");
    fs::metadata(root.join(path.trim_start_matches('/')))
        .unwrap()
        .ino()
}

/// Keeps every mount event read so far, so a test can wait for several in any order.
pub struct Recorder {
    reader: EventReader,
    seen: Vec<Mount>,
}

impl Recorder {
    pub fn new(reader: EventReader) -> Self {
        Self {
            reader,
            seen: Vec::new(),
        }
    }

    /// The first event matching `want`, reading more for up to 5 s if needed.
    pub async fn wait_for(&mut self, want: impl Fn(&Mount) -> bool) -> Mount {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(m) = self.seen.iter().find(|m| want(m)) {
                return m.clone();
            }
            let seen = &mut self.seen;
            let batch = self.reader.next_batch(|record| {
                if let Ok(Event::Mount(m)) = record {
                    seen.push(m);
                }
            });
            tokio::time::timeout_at(deadline, batch)
                .await
                .expect("the expected mount event within 5 s")
                .unwrap();
        }
    }
}

//! A pod's cgroup, as kubelet's cgroupfs driver names it (`kubepods/besteffort/pod<uid>`),
//! under a directory of the test's own in the cgroup v2 hierarchy; removed when dropped.
//! A process written into it is, to the agent, a process of that pod.

use std::path::{Path, PathBuf};

pub struct PodCgroup {
    pub dir: PathBuf,
    top: PathBuf,
}

impl PodCgroup {
    /// The cgroup v2 hierarchy pods' cgroups are made in; without one, `test` is skipped
    /// (which fails it under CI): a caller's pod cannot be read from its cgroup.
    pub fn hierarchy(test: &str) -> Option<PathBuf> {
        let root = volguard::node_files::caller_pod::unified_root();
        if root.is_none() {
            super::skip(test, "no cgroup v2 hierarchy here: a caller's pod cannot be read from its cgroup");
        }
        root
    }

    /// Pod `uid`'s cgroup under the hierarchy at `root`.
    pub fn new(root: &Path, uid: &str) -> Self {
        // Tests run side by side, and two may stand for the same pod.
        static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let top = root.join(format!("volguard-test-{}-{n}-{uid}", std::process::id()));
        let dir = top.join(format!("kubepods/besteffort/pod{uid}"));
        std::fs::create_dir_all(&dir).unwrap();
        Self { dir, top }
    }

    /// The file a process's pid is written to, to move it into this pod.
    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }
}

impl Drop for PodCgroup {
    fn drop(&mut self) {
        let mut dir = self.dir.clone();
        while dir.starts_with(&self.top) {
            let _ = std::fs::remove_dir(&dir);
            dir = dir.parent().unwrap().to_owned();
        }
    }
}

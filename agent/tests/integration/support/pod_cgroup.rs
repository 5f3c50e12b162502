//! A pod's cgroup, as kubelet's cgroupfs driver names it (`kubepods/besteffort/pod<uid>`),
//! under a directory of the test's own in the cgroup v2 hierarchy (or a v1 one: a pod
//! placed in v1 alone); removed when dropped.
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

    /// A cgroup v1 hierarchy (a hybrid host's, as this machine kind has), to place a pod in
    /// v1 alone; without one, `test` is skipped (which fails it under CI).
    pub fn v1_hierarchy(test: &str) -> Option<PathBuf> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        // `pids` or systemd's named hierarchy: a process joins either as it is (cpuset, say,
        // wants its cpus and mems set first).
        let root = mountinfo.lines().find_map(|line| {
            let (mount, filesystem) = line.split_once(" - ")?;
            let point = mount.split(' ').nth(4)?;
            let mut fields = filesystem.split(' ');
            let (kind, options) = (fields.next()?, fields.nth(1)?);
            let joinable = options.split(',').any(|o| o == "pids" || o == "name=systemd");
            (kind == "cgroup" && joinable).then(|| PathBuf::from(point))
        });
        if root.is_none() {
            super::skip(test, "no cgroup v1 hierarchy here (not a hybrid host): no pod can be placed in v1 alone");
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

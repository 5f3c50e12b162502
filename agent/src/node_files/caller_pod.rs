//! Which pod made a mount: the calling process's cgroup, read back with [`super::cgroup`].
//! A live process answers through `/proc/<pid>/cgroup`; mount(8), which drivers run and
//! which has usually exited by the time the event is handled, through the cgroup ID the
//! kernel recorded (the cgroup v2 directory's inode), looked up once under the unified
//! hierarchy. The answers by ID are cached, and the cache is bounded; a live process is
//! always asked (its ID may be shared: see [`CallerPods::pod_uid`]).

use std::{
    collections::HashMap,
    os::unix::{ffi::OsStrExt, fs::MetadataExt},
    path::{Path, PathBuf},
};

use super::cgroup::{self, PodCgroup};

/// Cgroup IDs remembered (pods and non-pods alike); past it the cache starts again.
const CACHE_ENTRIES: usize = 4096;
/// Directories a cgroup-ID lookup may visit (a node has a few per container).
const WALK_LIMIT: usize = 20_000;
/// Where the cgroup v2 hierarchy is: on its own, or beside v1 on a hybrid host.
const UNIFIED_ROOTS: [&str; 2] = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"];

#[derive(Debug)]
pub struct CallerPods {
    proc_root: PathBuf,
    unified_root: Option<PathBuf>,
    by_cgroup_id: HashMap<u64, Option<String>>,
    /// Whether `proc_root` shows the callers' pids. The kernel's events carry pids of the
    /// initial pid namespace; an agent in another (a node inside a pid namespace of its
    /// own, as the e2e harness runs it) would read someone else's `/proc/<pid>`.
    pids_are_ours: bool,
}

/// The inode of the initial pid namespace (the kernel's `PROC_PID_INIT_INO`).
const INIT_PID_NAMESPACE: u64 = 0xEFFF_FFFC;

impl Default for CallerPods {
    fn default() -> Self {
        Self::new(Path::new("/proc"), unified_root())
    }
}

/// The cgroup v2 mount point, if there is one.
pub fn unified_root() -> Option<PathBuf> {
    let is_cgroup2 = |p: &Path| {
        nix::sys::statfs::statfs(p).is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC)
    };
    UNIFIED_ROOTS.iter().map(PathBuf::from).find(|p| is_cgroup2(p))
}

/// The UID of the pod whose cgroup a live process is in (its `/proc/<pid>/cgroup`).
pub fn pod_of_process(proc_root: &Path, pid: u32) -> Option<String> {
    pod_in(&cgroup_file(proc_root, pid)?)
}

/// The UID of the pod whose cgroup a live task is in (`task`: `/proc/<pid>/task/<tid>`).
pub fn pod_of_task(task: &Path) -> Option<String> {
    pod_in(&std::fs::read(task.join("cgroup")).ok()?)
}

/// A live process's `/proc/<pid>/cgroup`.
fn cgroup_file(proc_root: &Path, pid: u32) -> Option<Vec<u8>> {
    std::fs::read(proc_root.join(pid.to_string()).join("cgroup")).ok()
}

/// The pod a `/proc/<pid>/cgroup` file names, if any.
fn pod_in(cgroup_file: &[u8]) -> Option<String> {
    cgroup::parse_proc_file(cgroup_file).map(|PodCgroup { pod_uid, .. }| pod_uid)
}

impl CallerPods {
    pub fn new(proc_root: &Path, unified_root: Option<PathBuf>) -> Self {
        Self { proc_root: proc_root.to_owned(), unified_root, by_cgroup_id: HashMap::new(), pids_are_ours: true }
    }

    /// For callers the kernel's events name (pids of the initial pid namespace): their
    /// `/proc/<pid>` is read only where this process's `/proc` shows that namespace; else
    /// only the cgroup ID answers.
    pub fn for_kernel_pids() -> Self {
        let ours = std::fs::metadata("/proc/self/ns/pid").is_ok_and(|m| m.ino() == INIT_PID_NAMESPACE);
        Self { pids_are_ours: ours, ..Self::default() }
    }

    /// Whether callers' pids are looked up in `/proc` (see [`Self::for_kernel_pids`]).
    pub fn reads_proc(&self) -> bool {
        self.pids_are_ours
    }

    /// The UID of the pod whose cgroup the caller (`tgid`, `cgroup_id` as the kernel saw
    /// them) was in, if it was a pod's.
    pub fn pod_uid(&mut self, tgid: u32, cgroup_id: u64) -> Option<String> {
        // A live process's own cgroup file is the answer, pod or not, before any by ID: the
        // kernel's cgroup ID is the unified hierarchy's, and where a runtime places pods in
        // v1 alone (a hybrid host) their processes share it with node processes.
        if let Some(live) = cgroup_file(&self.proc_root, tgid).filter(|_| self.pids_are_ours) {
            let uid = pod_in(&live);
            if cgroup::id_tells_pod(&live) {
                self.remember(cgroup_id, &uid);
            }
            return uid;
        }
        // Gone (mount(8), which drivers run, usually is by the time its event is handled):
        // by the ID the kernel recorded.
        if cgroup_id == 0 {
            return None;
        }
        if let Some(known) = self.by_cgroup_id.get(&cgroup_id) {
            return known.clone();
        }
        // A directory found by its ID is that cgroup's alone; an ID found nowhere (the
        // unified root's, say) is no answer to keep.
        let path = self.path_of(cgroup_id)?;
        let uid = cgroup::parse_path(path.as_os_str().as_bytes()).map(|PodCgroup { pod_uid, .. }| pod_uid);
        self.remember(cgroup_id, &uid);
        uid
    }

    /// Keeps the answer for a cgroup ID (never for 0, which the kernel does not give).
    fn remember(&mut self, cgroup_id: u64, uid: &Option<String>) {
        if cgroup_id == 0 {
            return;
        }
        if self.by_cgroup_id.len() >= CACHE_ENTRIES {
            self.by_cgroup_id.clear();
        }
        self.by_cgroup_id.insert(cgroup_id, uid.clone());
    }

    /// The cgroup v2 directory whose inode is `cgroup_id`, relative to the hierarchy.
    fn path_of(&self, cgroup_id: u64) -> Option<PathBuf> {
        let root = self.unified_root.as_ref()?;
        let mut pending = vec![root.clone()];
        let mut visited = 0;
        while let Some(dir) = pending.pop() {
            visited += 1;
            if visited > WALK_LIMIT {
                return None;
            }
            for entry in std::fs::read_dir(&dir).ok()?.flatten() {
                let Ok(meta) = entry.metadata() else { continue };
                if !meta.is_dir() {
                    continue;
                }
                if meta.ino() == cgroup_id {
                    return entry.path().strip_prefix(root).ok().map(|p| Path::new("/").join(p));
                }
                pending.push(entry.path());
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD: &str = "0c3c2d5e-1111-4a6e-9f00-0000000000a1";

    /// A fake /proc with one live process and a fake unified hierarchy with one pod.
    fn tree() -> (tempfile::TempDir, u64) {
        let tmp = tempfile::tempdir().unwrap();
        let proc_dir = tmp.path().join("proc/42");
        std::fs::create_dir_all(&proc_dir).unwrap();
        std::fs::write(proc_dir.join("cgroup"), format!("12:memory:/kubepods/besteffort/pod{POD}/abc\n0::/\n"))
            .unwrap();
        let container = tmp.path().join(format!("unified/kubepods/besteffort/pod{POD}/{}", "c".repeat(64)));
        std::fs::create_dir_all(&container).unwrap();
        let id = std::fs::metadata(&container).unwrap().ino();
        (tmp, id)
    }

    #[test]
    fn a_live_process_answers_from_proc_and_a_gone_one_from_its_cgroup_id() {
        let (tmp, container_id) = tree();
        let mut pods = CallerPods::new(&tmp.path().join("proc"), Some(tmp.path().join("unified")));
        assert_eq!(pods.pod_uid(42, 0).as_deref(), Some(POD), "live: /proc/42/cgroup (v1 line on a hybrid host)");
        assert_eq!(pods.pod_uid(4242, container_id).as_deref(), Some(POD), "gone: found by cgroup ID");
        std::fs::remove_dir_all(tmp.path().join("unified/kubepods")).unwrap();
        assert_eq!(pods.pod_uid(4242, container_id).as_deref(), Some(POD), "cached");
        assert_eq!(pods.pod_uid(4243, 1), None, "an unknown cgroup is no pod");
        assert_eq!(pods.pod_uid(4244, 0), None, "no ID and no process: unknown");
    }

    /// Two live processes with the same cgroup ID (the unified root's, as the kernel gives
    /// it on a hybrid host whose runtime places pods in v1 alone): a pod's and a node
    /// process's. Neither answer may be given to the other, in either order.
    #[test]
    fn processes_of_a_v1_only_pod_and_of_the_node_sharing_a_cgroup_id_are_told_apart() {
        const ROOT_ID: u64 = 1;
        let tmp = tempfile::tempdir().unwrap();
        let write = |pid: u32, content: String| {
            let dir = tmp.path().join(format!("proc/{pid}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("cgroup"), content).unwrap();
        };
        write(10, format!("12:memory:/kubepods/besteffort/pod{POD}/abc\n1:name=systemd:/kubepods\n0::/\n"));
        write(20, "12:memory:/system.slice/ssh.service\n1:name=systemd:/system.slice\n0::/\n".to_owned());
        for order in [[10, 20], [20, 10]] {
            let mut pods = CallerPods::new(&tmp.path().join("proc"), None);
            for pid in order.into_iter().chain(order) {
                let expected = (pid == 10).then_some(POD);
                assert_eq!(pods.pod_uid(pid, ROOT_ID).as_deref(), expected, "pid {pid}, asked in the order {order:?}");
            }
        }
    }

    /// A node process that is gone is found by its ID (a directory of the unified
    /// hierarchy, no pod's); a live process of a pod placed in v1 alone shares that ID and
    /// must still be its pod's.
    #[test]
    fn an_answer_kept_for_a_gone_node_process_is_not_given_to_a_live_v1_pod_process_with_its_id() {
        let tmp = tempfile::tempdir().unwrap();
        let shared = tmp.path().join("unified/system.slice/containerd.service");
        std::fs::create_dir_all(&shared).unwrap();
        let shared_id = std::fs::metadata(&shared).unwrap().ino();
        let dir = tmp.path().join("proc/10");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("cgroup"),
            format!("12:memory:/kubepods/besteffort/pod{POD}/abc\n0::/system.slice/containerd.service\n"),
        )
        .unwrap();
        let mut pods = CallerPods::new(&tmp.path().join("proc"), Some(tmp.path().join("unified")));
        assert_eq!(pods.pod_uid(4242, shared_id), None, "the gone node process, by its ID");
        assert_eq!(pods.pod_uid(10, shared_id).as_deref(), Some(POD), "the live pod process, by its cgroup file");
        assert_eq!(pods.pod_uid(4243, shared_id), None, "another gone process with that ID");
    }
}

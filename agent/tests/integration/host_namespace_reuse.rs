//! Namespaces the kernel's events name, as the agent finds them again. A mount
//! namespace's inode number is handed out again as soon as the namespace is gone.
//! A container that made a mount and exited at once (one that failed to start) leaves an
//! event whose namespace may, by the time the agent reads it, name another pod's new
//! container: the agent must not judge that container's mounts as the first caller's
//! (root, cgroup v2, a syscall backend). And the events' pids are the initial pid
//! namespace's: an agent in another one (the e2e's node) must not look them up in its
//! `/proc`, where they name other processes.

use std::{os::fd::AsRawFd, path::Path};

use crate::{
    host_out_of_band::{POD_A, Published},
    support::{cstr, have_root, pod_cgroup::PodCgroup},
};

const TEST: &str = "a_mount_event_whose_namespace_now_names_another_pods_is_not_judged_there";
const POD_C: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000c7";
/// Tries before the kernel is taken not to reuse inode numbers at once.
const TRIES: usize = 10;

#[test]
fn a_mount_event_whose_namespace_now_names_another_pods_is_not_judged_there() {
    if !have_root(TEST) {
        return;
    }
    let Some(cgroups) = PodCgroup::hierarchy(TEST) else { return };
    let (pod_a, pod_c) = (PodCgroup::new(&cgroups, POD_A), PodCgroup::new(&cgroups, POD_C));
    let published = Published::new("ns-reuse", &[]);
    let (ns, agent) = (&published.ns, &published.agent);
    let at = published.dir("reused-at");
    for _ in 0..TRIES {
        // The agent is stopped meanwhile, so that it reads C's event only after C's
        // namespace is gone and A has made its own (on a busy node it can read it at once).
        let paused = Paused::agent(agent.pid());
        // C: a namespace of its own, a bind of A's volume there, and gone at once.
        let (c_pid, c_inode, _) = in_own_namespace_binding(&pod_c, ns, &published.a_target, &at, false);
        // A, the owner, right after: a namespace of its own (likely given C's inode
        // number: other tests make namespaces too) with the same bind at the same place,
        // its own and legitimate.
        let (_, a_inode, a) = in_own_namespace_binding(&pod_a, ns, &published.a_target, &at, true);
        drop(paused);
        if a_inode != c_inode {
            continue;
        }
        let now_a = format!("by pid {c_pid}: mount namespace {c_inode} is now another pod's");
        let by_c = format!(" by pid {c_pid}");
        let line = agent.wait_for_line("C's event read", |l| l.contains(&by_c));
        assert!(line.contains(&now_a), "C's event, read once its namespace inode was A's: {line}");
        let a = a.expect("A stays");
        let through_a = a.path(&at.join("marker"));
        let read = std::fs::read_to_string(&through_a);
        let data = read.as_ref().ok().map(String::as_str);
        assert_eq!(data, Some("pv-rwop"), "A's own bind at {}: {read:?}", through_a.display());
        published.finish(&[]);
        return;
    }
    panic!("in {TRIES} tries, no mount namespace inode was handed out again at once");
}

/// The agent stopped (`SIGSTOP`) until dropped: the kernel's events wait in its ring.
struct Paused(nix::unistd::Pid);

impl Paused {
    fn agent(pid: u32) -> Self {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
        Self(pid)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.0, nix::sys::signal::Signal::SIGCONT);
    }
}

/// A process of `pod` that makes a mount namespace of its own (a slave of `ns`), binds
/// `source` onto `target` there, and exits or, where `stay`, stays: its pid, its
/// namespace's inode, and the process where it stays.
fn in_own_namespace_binding(
    pod: &PodCgroup,
    ns: &crate::support::kubelet::MountNs,
    source: &Path,
    target: &Path,
    stay: bool,
) -> (i32, u64, Option<crate::support::pod_process::Container>) {
    let (s, t) = (cstr(source), cstr(target));
    let (read, write) = nix::unistd::pipe().unwrap();
    let writer = write.as_raw_fd();
    let child = pod.fork_in(
        ns,
        // SAFETY: raw syscalls on data made before the fork.
        move || unsafe {
            let null = std::ptr::null();
            let mut st: libc::stat = std::mem::zeroed();
            if libc::unshare(libc::CLONE_NEWNS) != 0
                || libc::mount(null, c"/".as_ptr(), null, libc::MS_REC | libc::MS_SLAVE, null.cast()) != 0
                || libc::mount(s.as_ptr(), t.as_ptr(), null, libc::MS_BIND, null.cast()) != 0
                || libc::stat(c"/proc/self/ns/mnt".as_ptr(), &mut st) != 0
            {
                return 1;
            }
            let inode = st.st_ino.to_ne_bytes();
            if libc::write(writer, inode.as_ptr().cast(), inode.len()) == 8 { 0 } else { 1 }
        },
        stay,
    );
    drop(write);
    let mut inode = [0u8; 8];
    let got = nix::unistd::read(&read, &mut inode).unwrap_or(0);
    assert_eq!(got, 8, "the pod's process made no namespace of its own");
    let container = match stay {
        true => Some(crate::support::pod_process::Container::of(child)),
        false => {
            let status = nix::sys::wait::waitpid(child, None).unwrap();
            assert_eq!(status, nix::sys::wait::WaitStatus::Exited(child, 0), "the pod's process failed");
            None
        }
    };
    (child.as_raw(), u64::from_ne_bytes(inode), container)
}

/// A process in a pid namespace of its own does not take the kernel's pids for its
/// `/proc`'s; one in the initial namespace (this test, on the host) does.
#[test]
fn kernel_pids_are_looked_up_in_proc_only_from_the_initial_pid_namespace() {
    const PID_TEST: &str = "kernel_pids_are_looked_up_in_proc_only_from_the_initial_pid_namespace";
    use nix::{
        sched::{CloneFlags, unshare},
        sys::wait::{WaitStatus, waitpid},
        unistd::{ForkResult, fork},
    };
    use volguard::node_files::caller_pod::CallerPods;
    if !have_root(PID_TEST) {
        return;
    }
    assert!(CallerPods::for_kernel_pids().reads_proc(), "the host's own pid namespace is the initial one");
    // On a thread of its own: unshare(CLONE_NEWPID) puts that thread's children in it.
    let status = std::thread::spawn(|| {
        unshare(CloneFlags::CLONE_NEWPID).expect("unshare(CLONE_NEWPID)");
        // SAFETY: the child reads one file's metadata and exits.
        match unsafe { fork() }.expect("fork") {
            ForkResult::Child => {
                let code = if CallerPods::for_kernel_pids().reads_proc() { 1 } else { 0 };
                // SAFETY: leaves the forked child without running the harness's exit.
                unsafe { libc::_exit(code) }
            }
            ForkResult::Parent { child } => waitpid(child, None).expect("waitpid"),
        }
    })
    .join()
    .unwrap();
    assert!(matches!(status, WaitStatus::Exited(_, 0)), "a process in a new pid namespace reads /proc: {status:?}");
}

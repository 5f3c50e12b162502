//! Open files of an owned volume passed between processes: taken with `pidfd_getfd(2)`,
//! sent over `SCM_RIGHTS` (the `file_receive` hook).

use std::path::Path;

use super::{EACCES, POD_A, POD_C};
use crate::support::{
    kernel_refuses,
    kubelet::{Agent, KubeletTree, MountNs, pin_root, uninstall},
    pod_cgroup::PodCgroup,
    pod_process::HELD_FD,
};

/// What [`receive_fd`] returns where the descriptor sent did not come (`MSG_CTRUNC`).
const NOT_RECEIVED: i32 = 200;

/// Another pod takes no open file of an owned volume from another process: pod C's
/// `pidfd_getfd(2)` of pod A's open descriptor is refused (EACCES), and a descriptor of the
/// volume's file sent to pod C over `SCM_RIGHTS` does not arrive (the kernel drops it and
/// sets `MSG_CTRUNC`); both are reported with hook `file_receive` (route `change`). Pod A
/// takes and receives its own; pod C takes and receives a file outside the volume.
#[test]
#[ignore = "needs a kernel that refuses (BPF LSM or fmod_ret): runs in the VM (cargo xtask vm-test)"]
fn enforce_refuses_another_pod_an_owned_volumes_open_files_taken_or_sent() {
    const RECEIVE_TEST: &str = "enforce_refuses_another_pod_an_owned_volumes_open_files_taken_or_sent";
    assert!(kernel_refuses(), "precondition: a boot whose kernel refuses (bpf in lsm=, or fmod_ret)");
    let Some(cgroups) = PodCgroup::hierarchy(RECEIVE_TEST) else { return };
    let (pod_a, pod_c) = (PodCgroup::new(&cgroups, POD_A), PodCgroup::new(&cgroups, POD_C));
    let tree = KubeletTree::new();
    let pins = pin_root("received");
    let ns = MountNs::new();
    let agent = Agent::start_in(&ns, &tree.root(), &pins, &["pv-rwop"], &[]);
    agent.wait_for_line("the mode", |l| l.contains("mode=enforce"));

    let volume = tree.volume("pv-rwop");
    let file = volume.join("data");
    std::fs::write(&file, b"pod A's data").unwrap();
    let unrelated = tree.tmp.path().join("unrelated");
    std::fs::write(&unrelated, b"x").unwrap();
    let a_target = tree.publish_dir(POD_A, "pv-rwop");
    assert_eq!(ns.bind(&volume, &a_target), Ok(()), "kubelet publishes pv-rwop for pod A");

    let holder = pod_a.holding_open(&ns, &a_target.join("data"));
    let unrelated_holder = pod_a.holding_open(&ns, &unrelated);
    // SAFETY (each closure): raw syscalls in the forked child.
    let take = |pod: &PodCgroup, pid: i32| pod.exit_code_in(&ns, move || unsafe { take_fd(pid, HELD_FD) });
    assert_eq!(take(&pod_c, holder.pid()), EACCES, "pod C's pidfd_getfd of pod A's open file of the volume");
    assert_eq!(take(&pod_a, holder.pid()), 0, "pod A's pidfd_getfd of its own process's file");
    assert_eq!(take(&pod_c, unrelated_holder.pid()), 0, "pod C's pidfd_getfd of a file outside the volume");

    let sent_to = |pod: &PodCgroup, path: &Path| {
        let (tx, rx) = std::os::unix::net::UnixStream::pair().unwrap();
        // A node process (this test) opens it: allowed, and the descriptor sent.
        send_fd(&tx, &std::fs::File::open(path).unwrap());
        let socket = std::os::fd::AsRawFd::as_raw_fd(&rx);
        pod.exit_code_in(&ns, move || unsafe { receive_fd(socket) })
    };
    assert_eq!(sent_to(&pod_c, &file), NOT_RECEIVED, "the volume's file sent to pod C over SCM_RIGHTS");
    assert_eq!(sent_to(&pod_a, &file), 0, "the volume's file sent to pod A");
    assert_eq!(sent_to(&pod_c, &unrelated), 0, "a file outside the volume sent to pod C");

    agent.wait_for_line("a refused receipt", |l| {
        l.contains("CONFLICT blocked (EACCES) file_receive") && l.contains("\"pv-rwop\"") && l.contains(POD_C)
    });
    let refused = agent.metric_family_sum_where("volguard_conflicts_total", "route=\"change\"");
    assert!(refused >= 1.0, "refused receipts are counted with route change: {refused}");

    agent.stop();
    drop((holder, unrelated_holder));
    ns.umount(&a_target).unwrap();
    uninstall(&pins);
}

/// `pidfd_getfd(2)` of process `pid`'s descriptor `fd`: 0, or the errno.
///
/// # Safety
/// None beyond the syscalls' own.
unsafe fn take_fd(pid: i32, fd: i32) -> i32 {
    let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(-1);
    // SAFETY: raw syscalls with integer arguments.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0);
        if pidfd < 0 {
            return errno();
        }
        if libc::syscall(libc::SYS_pidfd_getfd, pidfd, fd, 0) < 0 { errno() } else { 0 }
    }
}

/// A message of the one byte `iov` points to, with `control_len` bytes of `control` for
/// ancillary data (raw fields only: the receiver builds it in a forked child).
fn one_byte_message(iov: &mut libc::iovec, control: &mut [u64; 8], control_len: usize) -> libc::msghdr {
    // SAFETY: an all-zero msghdr is a valid empty message.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = control_len;
    msg
}

/// Sends `file`'s descriptor over `socket` (`SCM_RIGHTS`) with one byte.
fn send_fd(socket: &std::os::unix::net::UnixStream, file: &std::fs::File) {
    use std::os::fd::AsRawFd;
    let mut byte = 0u8;
    let mut iov = libc::iovec { iov_base: (&raw mut byte).cast(), iov_len: 1 };
    let mut control = [0u64; 8];
    // SAFETY: CMSG_SPACE of one descriptor, a constant.
    let space = unsafe { libc::CMSG_SPACE(4) } as usize;
    let msg = one_byte_message(&mut iov, &mut control, space);
    // SAFETY: the message's buffers outlive the call; the control buffer holds one
    // descriptor's header (CMSG_SPACE(4) bytes, aligned).
    unsafe {
        let header = libc::CMSG_FIRSTHDR(&raw const msg);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(4) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<i32>(), file.as_raw_fd());
        assert_eq!(libc::sendmsg(socket.as_raw_fd(), &raw const msg, 0), 1, "sendmsg(SCM_RIGHTS)");
    }
}

/// Receives one message over `socket`: 0 if a descriptor came with it, [`NOT_RECEIVED`] if
/// the kernel kept it back, else the errno.
///
/// # Safety
/// None beyond the syscalls' own.
unsafe fn receive_fd(socket: i32) -> i32 {
    let mut byte = 0u8;
    let mut iov = libc::iovec { iov_base: (&raw mut byte).cast(), iov_len: 1 };
    let mut control = [0u64; 8];
    let room = std::mem::size_of_val(&control);
    let mut msg = one_byte_message(&mut iov, &mut control, room);
    // SAFETY: the message's buffers outlive the call.
    unsafe {
        if libc::recvmsg(socket, &raw mut msg, 0) < 0 {
            return std::io::Error::last_os_error().raw_os_error().unwrap_or(-1);
        }
        let truncated = msg.msg_flags & libc::MSG_CTRUNC != 0;
        if truncated || libc::CMSG_FIRSTHDR(&raw const msg).is_null() { NOT_RECEIVED } else { 0 }
    }
}

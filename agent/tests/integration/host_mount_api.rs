//! Host eBPF tests (root) for the rest of the mount family: umount2 and the new mount
//! API (called through raw syscalls: this util-linux is too old to use it), entry/exit
//! pairing, and lost-event counting when the ring buffer is full.

use std::{os::unix::ffi::OsStrExt, path::Path, time::Duration};

use nix::{
    errno::Errno,
    mount::{MsFlags, mount},
    unistd::gettid,
};
use volguard::{
    kernel::decode::{Call, Event, RawString},
    kernel::{counters::Counters, loader::LoadedObject},
    sys::mountns::run_in_private_mount_ns,
};
use volguard_common::{counters::Counter, mount_api::*};

use crate::support::{cstr, have_root, make_dirs, skip, tracer, tracer_with};

fn raw(path: &Path) -> RawString {
    RawString { bytes: path.as_os_str().as_bytes().to_vec(), truncated: false }
}

/// A raw syscall's result as `Ok(value)` or the errno.
fn check(ret: libc::c_long) -> Result<i64, Errno> {
    if ret < 0 { Err(Errno::last()) } else { Ok(ret) }
}

/// `struct mount_attr` (MOUNT_ATTR_SIZE_VER0).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// The fds and thread the sequence below produced, to compare with the events.
#[derive(Debug)]
struct Made {
    tid: u32,
    tree: i64,
    fs: i64,
    mnt: i64,
    picked: i64,
}

/// What runc does for an id-mapped mount (open_tree + move_mount), what a new-API mount
/// of a fresh tmpfs looks like (fsopen, fsconfig, fsmount, move_mount), a reconfigure
/// (fspick), an attribute change (mount_setattr) and a lazy unmount (umount2).
fn new_api_sequence(source: &Path, tree_target: &Path, fs_target: &Path) -> Result<Made, Errno> {
    let (source, tree_target, fs_target) = (cstr(source), cstr(tree_target), cstr(fs_target));
    let empty = c"";
    let null = std::ptr::null::<libc::c_char>();
    let attr = MountAttr { attr_set: MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
    // SAFETY: raw syscalls with valid NUL-terminated strings and a valid struct pointer.
    unsafe {
        let tree =
            check(libc::syscall(libc::SYS_open_tree, AT_FDCWD, source.as_ptr(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC))?;
        check(libc::syscall(
            libc::SYS_move_mount,
            tree,
            empty.as_ptr(),
            AT_FDCWD,
            tree_target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        ))?;
        let fs = check(libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), FSOPEN_CLOEXEC))?;
        check(libc::syscall(libc::SYS_fsconfig, fs, FSCONFIG_SET_STRING, c"size".as_ptr(), c"1m".as_ptr(), 0))?;
        check(libc::syscall(libc::SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, null, null, 0))?;
        let mnt = check(libc::syscall(libc::SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NODEV))?;
        check(libc::syscall(
            libc::SYS_move_mount,
            mnt,
            empty.as_ptr(),
            AT_FDCWD,
            fs_target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        ))?;
        let picked = check(libc::syscall(libc::SYS_fspick, AT_FDCWD, fs_target.as_ptr(), FSPICK_CLOEXEC))?;
        check(libc::syscall(libc::SYS_mount_setattr, AT_FDCWD, fs_target.as_ptr(), 0, &attr, size_of::<MountAttr>()))?;
        check(libc::syscall(libc::SYS_umount2, tree_target.as_ptr(), MNT_DETACH))?;
        for fd in [tree, fs, mnt, picked] {
            libc::close(fd as i32);
        }
        Ok(Made { tid: gettid().as_raw() as u32, tree, fs, mnt, picked })
    }
}

#[tokio::test]
async fn new_mount_api_and_umount_are_traced_with_arguments_and_results() {
    if !have_root("new_mount_api_and_umount_are_traced_with_arguments_and_results") {
        return;
    }
    let (_ebpf, mut recorder) = tracer();
    let tmp = tempfile::tempdir().unwrap();
    let [source, tree_target, fs_target] = make_dirs(tmp.path(), ["source", "tree", "fs"]);

    let (s, t, f) = (source.clone(), tree_target.clone(), fs_target.clone());
    let made = run_in_private_mount_ns("vg-newapi-test", move || new_api_sequence(&s, &t, &f)).unwrap().unwrap();

    // The namespace thread's make-private mount(2), then the ten calls above.
    let events = recorder.wait_for_n(11, |e| e.caller.pid == made.tid).await;
    let calls: Vec<(&Call, i64)> = events[1..].iter().map(|e| (&e.call, e.ret)).collect();
    let (key, none) = (RawString::from("size"), RawString::default());
    let expected: Vec<(Call, i64)> = vec![
        (Call::OpenTree { dfd: AT_FDCWD, path: raw(&source), flags: OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC }, made.tree),
        (
            Call::MoveMount {
                from_dfd: made.tree as i32,
                from_path: none.clone(),
                to_dfd: AT_FDCWD,
                to_path: raw(&tree_target),
                flags: MOVE_MOUNT_F_EMPTY_PATH,
            },
            0,
        ),
        (Call::Fsopen { fs_name: RawString::from("tmpfs"), flags: FSOPEN_CLOEXEC }, made.fs),
        (Call::Fsconfig { fd: made.fs as i32, cmd: FSCONFIG_SET_STRING, key, aux: 0 }, 0),
        (Call::Fsconfig { fd: made.fs as i32, cmd: FSCONFIG_CMD_CREATE, key: none.clone(), aux: 0 }, 0),
        (Call::Fsmount { fs_fd: made.fs as i32, flags: FSMOUNT_CLOEXEC, attr_flags: MOUNT_ATTR_NODEV }, made.mnt),
        (
            Call::MoveMount {
                from_dfd: made.mnt as i32,
                from_path: none,
                to_dfd: AT_FDCWD,
                to_path: raw(&fs_target),
                flags: MOVE_MOUNT_F_EMPTY_PATH,
            },
            0,
        ),
        (Call::Fspick { dfd: AT_FDCWD, path: raw(&fs_target), flags: FSPICK_CLOEXEC }, made.picked),
        (Call::MountSetattr { dfd: AT_FDCWD, path: raw(&fs_target), flags: 0 }, 0),
        (Call::Umount { target: raw(&tree_target), flags: MNT_DETACH }, 0),
    ];
    let expected: Vec<(&Call, i64)> = expected.iter().map(|(c, r)| (c, *r)).collect();
    assert_eq!(calls, expected, "each entry's arguments paired with its own exit's result, in order");
    for e in &events {
        assert!(e.duration_ns > 0, "{e:?}");
        assert_eq!(e.caller.comm.as_bytes(), b"vg-newapi-test");
    }
}

#[tokio::test]
async fn open_tree_attr_is_traced_where_the_kernel_has_it() {
    if !have_root("open_tree_attr_is_traced_where_the_kernel_has_it") {
        return;
    }
    let (_ebpf, mut recorder) = tracer();
    if !Path::new("/sys/kernel/tracing/events/syscalls/sys_enter_open_tree_attr").is_dir() {
        skip(
            "open_tree_attr_is_traced_where_the_kernel_has_it",
            "open_tree_attr does not exist before Linux 6.15 (attaching skipped it, as it must)",
        );
        return;
    }
    const SYS_OPEN_TREE_ATTR: libc::c_long = 467; // x86_64, Linux 6.15
    let tmp = tempfile::tempdir().unwrap();
    let path = cstr(tmp.path());
    let (tid, fd) = run_in_private_mount_ns("vg-otattr-test", move || {
        // SAFETY: valid path; a NULL attr with size 0 asks for a plain open_tree.
        let ret = unsafe {
            libc::syscall(SYS_OPEN_TREE_ATTR, AT_FDCWD, path.as_ptr(), OPEN_TREE_CLONE, std::ptr::null::<u8>(), 0)
        };
        (gettid().as_raw() as u32, check(ret))
    })
    .unwrap();
    let fd = fd.unwrap();
    // SAFETY: our own fd.
    unsafe { libc::close(fd as i32) };
    let e = recorder.wait_for(|e| e.caller.pid == tid && matches!(e.call, Call::OpenTreeAttr { .. })).await;
    assert_eq!(e.call, Call::OpenTreeAttr { dfd: AT_FDCWD, path: raw(tmp.path()), flags: OPEN_TREE_CLONE });
    assert_eq!(e.ret, fd);
}

#[tokio::test]
async fn a_full_ring_buffer_counts_every_lost_event() {
    if !have_root("a_full_ring_buffer_counts_every_lost_event") {
        return;
    }
    // One page holds only a few records; nobody reads until the burst is over.
    let (mut ebpf, mut recorder) = tracer_with(LoadedObject::load_with_ring_size(Some(4096)).unwrap());
    let counters = Counters::new(&mut ebpf).unwrap();
    let lost_before = counters.get(Counter::EventsLost);
    let tmp = tempfile::tempdir().unwrap();
    let (missing, target) = (tmp.path().join("missing"), tmp.path().to_path_buf());
    const BURST: usize = 200;
    let tid = run_in_private_mount_ns("vg-lost-test", move || {
        for _ in 0..BURST {
            let failed = mount(Some(&missing), &target, None::<&str>, MsFlags::MS_BIND, None::<&str>);
            assert_eq!(failed, Err(Errno::ENOENT));
        }
        gettid().as_raw() as u32
    })
    .unwrap();

    recorder.drain(Duration::from_millis(300)).await;
    let delivered = recorder.seen().iter().filter(|e: &&Event| e.caller.pid == tid).count();
    let lost = counters.get(Counter::EventsLost) - lost_before;
    assert!(delivered < BURST, "the small ring cannot hold the burst ({delivered} delivered)");
    // Every one of our syscalls (the burst plus the make-private mount) was either
    // delivered or counted; other processes' drops can only add to the count.
    let ours = BURST as u64 + 1;
    assert!(delivered as u64 + lost >= ours, "delivered {delivered} + lost {lost} < {ours}");
}

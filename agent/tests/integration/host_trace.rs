//! Host eBPF tests (root): the real tracepoint programs in the running kernel see real
//! mount(2) calls, made in a private mount namespace so the host's mount table is untouched.

use std::{
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
    time::Duration,
};

use nix::{
    errno::Errno,
    mount::{MsFlags, mount},
    unistd::{getpid, gettid},
};
use volguard::{
    kernel::{
        counters::Counters,
        decode::{Call, Event, RawString},
        loader::LoadedObject,
    },
    sys::mountns::run_in_private_mount_ns,
};
use volguard_common::{counters::Counter, event::PATH_LEN};

use crate::support::{Recorder, have_root, make_dirs, mount_onto, own_cgroup_id, tracer, tracer_waking_for};

/// The mount(2) arguments of `event`, which must be a mount.
fn mount_args(event: &Event) -> (&RawString, &RawString, &RawString, u64) {
    let Call::Mount { source, target, fstype, flags } = &event.call else { panic!("not a mount: {event:?}") };
    (source, target, fstype, *flags)
}

#[tokio::test]
async fn bind_mount_is_traced_with_every_field() {
    if !have_root("bind_mount_is_traced_with_every_field") {
        return;
    }
    let (mut ebpf, mut recorder) = tracer();
    let tmp = tempfile::tempdir().unwrap();
    let [source, target] = make_dirs(tmp.path(), ["source", "target"]);

    let (s, t) = (source.clone(), target.clone());
    let (tid, result) = run_in_private_mount_ns("vg-bind-test", move || {
        // NULL fstype, as runc passes for binds.
        let flags = MsFlags::MS_BIND | MsFlags::MS_REC;
        (gettid().as_raw() as u32, mount(Some(&s), &t, None::<&str>, flags, None::<&str>))
    })
    .unwrap();
    result.unwrap();

    let e = recorder.wait_for(mount_onto(&target)).await;
    assert_eq!(e.caller.pid, tid, "pid is the calling thread");
    assert_eq!(e.caller.tgid, getpid().as_raw() as u32, "tgid is this process");
    assert_eq!(e.caller.comm.as_bytes(), b"vg-bind-test");
    assert_eq!(e.caller.cgroup_id, own_cgroup_id());
    assert_eq!(e.ret, 0);
    assert!(e.duration_ns > 0 && e.duration_ns < 5_000_000_000, "duration {} ns", e.duration_ns);
    let (m_source, m_target, m_fstype, m_flags) = mount_args(&e);
    assert_eq!(m_source.as_bytes(), source.as_os_str().as_bytes());
    assert_eq!(m_fstype.as_bytes(), b"", "NULL fstype reads as empty");
    assert_eq!(m_flags, (MsFlags::MS_BIND | MsFlags::MS_REC).bits());
    assert!(!m_source.truncated && !m_target.truncated && !m_fstype.truncated);
    assert_parked_where_expected(&mut ebpf);
}

/// Every call was parked between entry and exit, in the thread's storage or, where the
/// kernel cannot create that (the 7.3 VM boots: local storage needs CMPXCHG16B there), by
/// thread id: the boot says which (`VOLGUARD_EXPECT_PARKED_BY_THREAD`, default no).
fn assert_parked_where_expected(ebpf: &mut LoadedObject) {
    let counters = Counters::new(ebpf).unwrap();
    assert_eq!(counters.get(Counter::PendingInsertFailed), 0, "every traced call was parked");
    let by_thread = counters.get(Counter::PendingByThread);
    if std::env::var("VOLGUARD_EXPECT_PARKED_BY_THREAD").as_deref() == Ok("yes") {
        assert!(by_thread > 0, "calls parked by thread id where task storage cannot be created");
    } else {
        assert_eq!(by_thread, 0, "calls parked in task storage");
    }
}

#[tokio::test]
async fn tmpfs_and_failed_mounts_carry_type_flags_and_errno() {
    if !have_root("tmpfs_and_failed_mounts_carry_type_flags_and_errno") {
        return;
    }
    let (_ebpf, mut recorder) = tracer();
    let tmp = tempfile::tempdir().unwrap();
    let [tmpfs_target, failed_target] = make_dirs(tmp.path(), ["tmpfs", "failed"]);
    let missing = tmp.path().join("does-not-exist");

    let (t, f, s) = (tmpfs_target.clone(), failed_target.clone(), missing.clone());
    let results = run_in_private_mount_ns("vg-tmpfs-test", move || {
        let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
        (
            mount(Some("volguard-test"), &t, Some("tmpfs"), flags, Some("size=1m")),
            mount(Some(&s), &f, None::<&str>, MsFlags::MS_BIND, None::<&str>),
        )
    })
    .unwrap();
    assert_eq!(results, (Ok(()), Err(Errno::ENOENT)));

    let ok = recorder.wait_for(mount_onto(&tmpfs_target)).await;
    let (source, _, fstype, flags) = mount_args(&ok);
    assert_eq!((source.as_bytes(), fstype.as_bytes(), ok.ret), (&b"volguard-test"[..], &b"tmpfs"[..], 0));
    assert_eq!(flags, (MsFlags::MS_NOSUID | MsFlags::MS_NODEV).bits());
    let failed = recorder.wait_for(mount_onto(&failed_target)).await;
    assert_eq!(failed.ret, -(Errno::ENOENT as i64));
    assert_eq!(mount_args(&failed).0.as_bytes(), missing.as_os_str().as_bytes());
    assert!(failed.caller.pid == ok.caller.pid && failed.start_ns > ok.start_ns, "same thread, in order");
}

/// A directory under `root` whose absolute path is exactly `len` bytes long.
fn dir_of_length(root: &Path, len: usize) -> PathBuf {
    let mut path = root.to_path_buf();
    while path.as_os_str().len() < len {
        let room = len - path.as_os_str().len() - 1;
        // Leave no room for a 0-byte component; keep components within NAME_MAX.
        let take = if room > 200 { 100 } else { room };
        path.push("d".repeat(take));
    }
    std::fs::create_dir_all(&path).unwrap();
    assert_eq!(path.as_os_str().len(), len);
    path
}

#[tokio::test]
async fn long_paths_are_cut_at_the_bound_and_flagged_exactly() {
    if !have_root("long_paths_are_cut_at_the_bound_and_flagged_exactly") {
        return;
    }
    let (_ebpf, mut recorder) = tracer();
    let tmp = tempfile::tempdir().unwrap();
    let [source] = make_dirs(tmp.path(), ["s"]);
    let fits = dir_of_length(&tmp.path().join("fit"), PATH_LEN - 1);
    let cut = dir_of_length(&tmp.path().join("cut"), PATH_LEN + 40);

    let (s, f, c) = (source.clone(), fits.clone(), cut.clone());
    let results = run_in_private_mount_ns("vg-trunc-test", move || {
        (
            mount(Some(&s), &f, None::<&str>, MsFlags::MS_BIND, None::<&str>),
            mount(Some(&s), &c, None::<&str>, MsFlags::MS_BIND, None::<&str>),
        )
    })
    .unwrap();
    assert_eq!(results, (Ok(()), Ok(())));

    let exact = recorder.wait_for(mount_onto(&fits)).await;
    assert!(!mount_args(&exact).1.truncated, "a path of exactly PATH_LEN-1 bytes fits");
    let kept = cut.as_os_str().as_bytes()[..PATH_LEN - 1].to_vec();
    let long =
        recorder.wait_for(move |e| matches!(&e.call, Call::Mount { target, .. } if target.as_bytes() == kept)).await;
    let (source, target, _, _) = mount_args(&long);
    assert!(target.truncated, "a longer path is flagged");
    assert!(!source.truncated);
    assert_eq!(long.ret, 0, "the mount itself is unaffected");
}

/// A mount outside the kubelet tree is written without waking the reader; the next record
/// that may concern kubelet wakes it (forced: the kernel would not wake it for a record
/// behind an unread one), and both arrive in order. The timed drain is an hour away, so
/// only a wake-up can bring them.
#[tokio::test]
async fn a_mount_outside_the_kubelet_tree_waits_for_the_next_kubelet_record() {
    if !have_root("a_mount_outside_the_kubelet_tree_waits_for_the_next_kubelet_record") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let kubelet_root = tmp.path().join("kubelet");
    let [source, outside, inside] = make_dirs(tmp.path(), ["source", "outside", "kubelet/pods/uid-a/volumes"]);
    let (_ebpf, mut recorder) = tracer_waking_for(&kubelet_root, false, Duration::from_secs(3600));

    bind_without_waking(&mut recorder, &source, &outside, "the outside mount", 5).await;

    let (s, i) = (source.clone(), inside.clone());
    let result = run_in_private_mount_ns("vg-lazy-test", move || {
        mount(Some(&s), &i, None::<&str>, MsFlags::MS_BIND, None::<&str>)
    })
    .unwrap();
    result.unwrap();
    let inside_mount = recorder.wait_for(mount_onto(&inside)).await;
    let outside_mount = recorder.wait_for(mount_onto(&outside)).await;
    assert!(outside_mount.start_ns < inside_mount.start_ns);
    let position = |want: &Event| recorder.seen().iter().position(|e| e.start_ns == want.start_ns);
    assert!(position(&outside_mount) < position(&inside_mount), "read in the order written");
}

/// Where the LSM hooks decide conflicts, even a publish under the kubelet tree is written
/// without waking the reader: it arrives at the timed drain.
#[tokio::test]
async fn where_the_kernel_decides_a_publish_waits_for_the_timed_drain() {
    if !have_root("where_the_kernel_decides_a_publish_waits_for_the_timed_drain") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let kubelet_root = tmp.path().join("kubelet");
    let [source, inside] = make_dirs(tmp.path(), ["source", "kubelet/pods/uid-a/volumes"]);
    let drain = Duration::from_secs(2);
    // The first timed drain comes a whole period after the tracer starts.
    let (_ebpf, mut recorder) = tracer_waking_for(&kubelet_root, true, drain);
    let started = std::time::Instant::now();
    // One window only: a retry would straddle the timed drain.
    bind_without_waking(&mut recorder, &source, &inside, "the publish", 1).await;
    let publish = recorder.wait_for(mount_onto(&inside)).await;
    assert_eq!(publish.ret, 0);
    assert!(started.elapsed() < drain + Duration::from_secs(1), "read by the timed drain");
}

/// Binds `source` onto `target` in a private mount namespace and checks that its record
/// did not wake the reader within 500 ms. A window in which other processes' records woke
/// the reader proves nothing: the bind is tried again, up to `attempts` times, and a test
/// that never gets a quiet window fails rather than pass on another record's wake-up.
async fn bind_without_waking(recorder: &mut Recorder, source: &Path, target: &Path, what: &str, attempts: usize) {
    for _ in 0..attempts {
        let already = recorder.seen().len();
        let (s, t) = (source.to_owned(), target.to_owned());
        let (tid, result) = run_in_private_mount_ns("vg-lazy-test", move || {
            (gettid().as_raw() as u32, mount(Some(&s), &t, None::<&str>, MsFlags::MS_BIND, None::<&str>))
        })
        .unwrap();
        result.unwrap();
        recorder.drain(Duration::from_millis(500)).await;
        let window = &recorder.seen()[already..];
        let ours = |e: &Event| e.caller.pid == tid;
        match (window.iter().any(ours), window.iter().any(|e| !ours(e))) {
            (_, true) => continue,
            (true, false) => panic!("{what} woke the reader: {window:?}"),
            (false, false) => return,
        }
    }
    panic!("{what}: other records woke the reader in each of {attempts} windows; nothing was shown");
}

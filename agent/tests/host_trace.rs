//! Host eBPF tests (root): the real tracepoint programs in the running kernel see real
//! mounts, made in a private mount namespace so the host's mount table is untouched.

mod support;

use std::{
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
};

use nix::{
    errno::Errno,
    mount::{MsFlags, mount},
    unistd::{getpid, gettid},
};
use support::{Recorder, have_root, own_cgroup_id};
use volguard::{
    bpf::{loader, reader::EventReader},
    mountns::run_in_private_mount_ns,
};
use volguard_common::event::PATH_LEN;

fn tracer() -> (aya::Ebpf, Recorder) {
    let mut ebpf = loader::load().expect("load the embedded eBPF object");
    loader::attach_all(&mut ebpf, loader::TRACE_HOOKS).expect("attach the mount tracepoints");
    let reader = EventReader::new(&mut ebpf).unwrap();
    (ebpf, Recorder::new(reader))
}

fn dirs(root: &Path, names: &[&str]) -> Vec<PathBuf> {
    names
        .iter()
        .map(|n| {
            let d = root.join(n);
            std::fs::create_dir_all(&d).unwrap();
            d
        })
        .collect()
}

fn is(path: &Path) -> impl Fn(&volguard::decode::Mount) -> bool {
    let want = path.as_os_str().as_bytes().to_vec();
    move |m| m.target.as_bytes() == want
}

#[tokio::test]
async fn bind_mount_is_traced_with_every_field() {
    if !have_root("bind_mount_is_traced_with_every_field") {
        return;
    }
    let (_ebpf, mut reader) = tracer();
    let tmp = tempfile::tempdir().unwrap();
    let [source, target] =
        <[PathBuf; 2]>::try_from(dirs(tmp.path(), &["source", "target"])).unwrap();

    let (s, t) = (source.clone(), target.clone());
    let (tid, result) = run_in_private_mount_ns("vg-bind-test", move || {
        // NULL fstype, as runc passes for binds through the fd path.
        (
            gettid().as_raw() as u32,
            mount(
                Some(&s),
                &t,
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            ),
        )
    })
    .unwrap();
    result.unwrap();

    let m = reader.wait_for(is(&target)).await;
    assert_eq!(m.caller.pid, tid, "pid is the calling thread");
    assert_eq!(
        m.caller.tgid,
        getpid().as_raw() as u32,
        "tgid is this process"
    );
    assert_eq!(m.caller.comm.as_bytes(), b"vg-bind-test");
    assert_eq!(m.caller.cgroup_id, own_cgroup_id());
    assert_eq!(m.source.as_bytes(), source.as_os_str().as_bytes());
    assert_eq!(m.fstype.as_bytes(), b"", "NULL fstype reads as empty");
    assert_eq!(m.flags, (MsFlags::MS_BIND | MsFlags::MS_REC).bits());
    assert_eq!(m.ret, 0);
    assert!(
        m.duration_ns > 0 && m.duration_ns < 5_000_000_000,
        "duration {} ns",
        m.duration_ns
    );
    assert!(!m.source_truncated && !m.target_truncated && !m.fstype_truncated);
}

#[tokio::test]
async fn tmpfs_and_failed_mounts_carry_type_flags_and_errno() {
    if !have_root("tmpfs_and_failed_mounts_carry_type_flags_and_errno") {
        return;
    }
    let (_ebpf, mut reader) = tracer();
    let tmp = tempfile::tempdir().unwrap();
    let [tmpfs_target, failed_target] =
        <[PathBuf; 2]>::try_from(dirs(tmp.path(), &["tmpfs", "failed"])).unwrap();
    let missing = tmp.path().join("does-not-exist");

    let (t, f, s) = (tmpfs_target.clone(), failed_target.clone(), missing.clone());
    let results = run_in_private_mount_ns("vg-tmpfs-test", move || {
        let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
        (
            mount(
                Some("volguard-test"),
                &t,
                Some("tmpfs"),
                flags,
                Some("size=1m"),
            ),
            mount(Some(&s), &f, None::<&str>, MsFlags::MS_BIND, None::<&str>),
        )
    })
    .unwrap();
    assert_eq!(results, (Ok(()), Err(Errno::ENOENT)));

    let ok = reader.wait_for(is(&tmpfs_target)).await;
    assert_eq!(
        (ok.source.as_bytes(), ok.fstype.as_bytes(), ok.ret),
        (&b"volguard-test"[..], &b"tmpfs"[..], 0)
    );
    assert_eq!(ok.flags, (MsFlags::MS_NOSUID | MsFlags::MS_NODEV).bits());
    let failed = reader.wait_for(is(&failed_target)).await;
    assert_eq!(failed.ret, -(Errno::ENOENT as i64));
    assert_eq!(failed.source.as_bytes(), missing.as_os_str().as_bytes());
    assert!(
        failed.caller.pid == ok.caller.pid && failed.start_ns > ok.start_ns,
        "same thread, in order"
    );
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
    let (_ebpf, mut reader) = tracer();
    let tmp = tempfile::tempdir().unwrap();
    let source = dirs(tmp.path(), &["s"]).remove(0);
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

    let exact = reader.wait_for(is(&fits)).await;
    assert!(
        !exact.target_truncated,
        "a path of exactly PATH_LEN-1 bytes fits"
    );
    let kept = &cut.as_os_str().as_bytes()[..PATH_LEN - 1];
    let long = reader.wait_for(|m| m.target.as_bytes() == kept).await;
    assert!(long.target_truncated, "a longer path is flagged");
    assert!(!long.source_truncated);
    assert_eq!(long.ret, 0, "the mount itself is unaffected");
}

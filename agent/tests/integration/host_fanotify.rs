//! The fanotify backend on the host (root, Linux 6.15+): the raw mount notifications and
//! statmount/listmount in a private namespace, then the agent with no tracing program
//! attached, auto picking fanotify, and the queue overflow that forces a resync.

use std::{fs::File, path::Path, time::Duration};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use volguard::sys::{
    fanotify::{MountWatch, Notice, parse},
    mountns::run_in_private_mount_ns,
    statmount::{StatmountError, listmount, namespace_id, statmount},
};

use crate::support::have_root;

/// Whether this kernel has fanotify mount notifications; says why not when it has none,
/// and fails where root tests are required (this host's 6.18 has them).
pub fn fanotify_works(test: &str) -> bool {
    let ns = File::open("/proc/self/ns/mnt").unwrap();
    match MountWatch::new(&ns, "/proc/self/ns/mnt") {
        Ok(_) => true,
        Err(e) => {
            assert!(
                std::env::var_os("VOLGUARD_REQUIRE_FANOTIFY").is_none(),
                "{test}: fanotify mount notifications are required here: {e}"
            );
            eprintln!("SKIPPED {test}: this kernel has no fanotify mount notifications ({e})");
            false
        }
    }
}

/// Reads notices until `want` many came, or 5 s passed.
fn notices(watch: &MountWatch, want: usize) -> Vec<Notice> {
    let mut found = Vec::new();
    let mut buf = vec![0u8; 4096];
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while found.len() < want && std::time::Instant::now() < deadline {
        match watch.read(&mut buf) {
            Ok(n) => found.extend(parse(&buf[..n]).into_iter().map(Result::unwrap)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("reading notices: {e}"),
        }
    }
    found
}

#[test]
fn a_bind_and_its_unmount_are_notified_and_statmount_reads_the_mount() {
    let test = "a_bind_and_its_unmount_are_notified_and_statmount_reads_the_mount";
    if !have_root(test) || !fanotify_works(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (source, target) = (dir.path().join("source"), dir.path().join("target"));
    std::fs::create_dir_all(&source).unwrap();
    std::fs::create_dir_all(&target).unwrap();
    run_in_private_mount_ns("vg-fan-test", move || {
        let ns = File::open("/proc/thread-self/ns/mnt").unwrap();
        let ns_id = namespace_id(&ns).unwrap();
        let watch = MountWatch::new(&ns, "/proc/thread-self/ns/mnt").unwrap();
        let before = listmount(ns_id).unwrap();
        assert!(!before.is_empty());

        mount(Some("vg-fan-source"), &source, Some("tmpfs"), MsFlags::empty(), None::<&str>).unwrap();
        mount(Some(&source), &target, None::<&str>, MsFlags::MS_BIND, None::<&str>).unwrap();
        let attached = notices(&watch, 2);
        let [Notice::Attached(tmpfs), Notice::Attached(bind)] = attached[..] else { panic!("{attached:?}") };
        let facts = statmount(bind, ns_id).unwrap();
        assert_eq!((facts.mnt_id, facts.mount_point.as_path(), facts.ns_id), (bind, target.as_path(), ns_id));
        assert_eq!((facts.fs_type.as_str(), facts.source.as_deref()), ("tmpfs", Some("vg-fan-source")));
        assert_eq!(facts.root, Path::new("/"));
        let table = std::fs::read_to_string("/proc/thread-self/mountinfo").unwrap();
        assert!(table.lines().any(|l| l.starts_with(&format!("{} ", facts.mnt_id_old))), "the mountinfo id");
        assert_eq!(listmount(ns_id).unwrap().len(), before.len() + 2);

        umount2(&target, MntFlags::empty()).unwrap();
        umount2(&source, MntFlags::MNT_DETACH).unwrap();
        assert_eq!(notices(&watch, 2), [Notice::Detached(bind), Notice::Detached(tmpfs)]);
        assert!(matches!(statmount(bind, ns_id), Err(StatmountError::Gone { mnt_id }) if mnt_id == bind));
    })
    .unwrap();
}

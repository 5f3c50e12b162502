//! The kubelet path classifier and the cgroup path parser: any path, never a panic.
#![no_main]

use std::{ffi::OsStr, os::unix::ffi::OsStrExt, path::Path};

use libfuzzer_sys::fuzz_target;
use volguard::{node_files::cgroup, node_files::kubelet};

fuzz_target!(|bytes: &[u8]| {
    let path = Path::new(OsStr::from_bytes(bytes));
    for root in [Path::new("/var/lib/kubelet"), Path::new("/"), Path::new("")] {
        let _ = kubelet::classify(root, path);
        let _ = kubelet::publish_target(root, path);
    }
    let _ = cgroup::parse(bytes);
    let _ = cgroup::parse_proc_file(bytes);
});

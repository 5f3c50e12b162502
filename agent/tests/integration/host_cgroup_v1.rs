//! A hybrid node whose runtime places pods in cgroup v1 alone (this machine kind's layout,
//! and the real node's in `cargo xtask e2e`): the kernel gives a pod's processes the cgroup
//! v2 ID of wherever they are in the unified hierarchy, shared with the node's processes.
//! The agent tells them apart by each live process's own cgroup file, whichever it met
//! first (root; a cgroup v1 hierarchy).

use std::path::Path;

use crate::{
    host_out_of_band::{Published, detached_at},
    support::{have_root, pod_cgroup::PodCgroup},
};

const TEST: &str = "a_pod_placed_in_cgroup_v1_alone_is_told_from_a_node_process_sharing_its_cgroup_v2_id";
const POD_V1: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000d1";

#[test]
fn a_pod_placed_in_cgroup_v1_alone_is_told_from_a_node_process_sharing_its_cgroup_v2_id() {
    if !have_root(TEST) {
        return;
    }
    let Some(v1) = PodCgroup::v1_hierarchy(TEST) else { return };
    let pod = PodCgroup::new(&v1, POD_V1);
    let published = Published::new("cgroup-v1", &[]);
    let (ns, a_target, agent) = (&published.ns, &published.a_target, &published.agent);
    let node_bind = |name: &str| {
        let dir = published.dir(name);
        ns.bind(a_target, &dir).unwrap();
        let point = dir.display().to_string();
        agent.wait_for_line("the node process's report", |l| {
            l.contains("CONFLICT reported (a node process") && l.contains(&format!(" at {point} by "))
        });
        assert_eq!(published.marker(&dir).ok().as_deref(), Some("pv-rwop"), "the node process's bind is left");
        dir
    };
    // The pod's process stays while the agent judges its bind: once gone, only its cgroup
    // v2 ID would be left to tell its pod, and that is the node's.
    let pod_bind = |name: &str| {
        let dir = published.dir(name);
        let target = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
        let source = std::ffi::CString::new(a_target.as_os_str().as_encoded_bytes()).unwrap();
        let bind = move || {
            // SAFETY: valid NUL-terminated strings.
            unsafe { libc::mount(source.as_ptr(), target.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null()) }
        };
        let process = pod.fork_in(ns, bind, true);
        let point = dir.display().to_string();
        agent.wait_for_line("the v1 pod's detach", |l| detached_at(&dir)(l) && l.contains(POD_V1));
        assert!(published.marker(&dir).is_err(), "the v1 pod reads the owner's data through its bind ({point})");
        let _ = nix::sys::signal::kill(process, nix::sys::signal::Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(process, None);
        dir
    };
    // The node's process first, then the pod's; and the other way round.
    let node_first = node_bind("node-1");
    let pod_next = pod_bind("v1-pod-1");
    let pod_first = pod_bind("v1-pod-2");
    let node_next = node_bind("node-2");
    let reported = agent.count_lines(|l| l.contains("CONFLICT reported (a node process"));
    let detached = agent.count_lines(|l| l.contains("CONFLICT detached"));
    assert_eq!((reported, detached), (2, 2), "each bind judged once, as its maker's");
    let points: [&Path; 4] = [&node_first, &pod_next, &pod_first, &node_next];
    published.finish(&points);
}

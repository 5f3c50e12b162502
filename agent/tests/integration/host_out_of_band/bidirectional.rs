//! A CSI node plugin's container (re)started while pod A's single-pod volume is published:
//! its runtime's recursive bind of kubelet's `pods/` (a `Bidirectional` hostPath, through
//! `/proc/thread-self/fd/N` as runc makes it) copies A's publish into the container's
//! namespace, in a shared peer group. The agent leaves that copy (the plugin's own
//! publishes reach the node through it), where it detaches the same copy in another pod's
//! container (`HostToContainer`).

use std::path::Path;

use volguard::node_files::mount_table::MountTable;

use super::{POD_C, Published, detached_at};
use crate::support::{
    have_root,
    kubelet::{KubeletTree, MountNs, syscall_backend},
    pod_cgroup::PodCgroup,
    pod_process::Container,
};

const TEST: &str = "a_csi_node_plugins_container_started_after_a_publish_keeps_its_bidirectional_copy";
/// The CSI node plugin's pod.
const POD_PLUGIN: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000d7";

#[test]
fn a_csi_node_plugins_container_started_after_a_publish_keeps_its_bidirectional_copy() {
    if !have_root(TEST) {
        return;
    }
    let Some(cgroups) = PodCgroup::hierarchy(TEST) else { return };
    let (plugin, pod_c) = (PodCgroup::new(&cgroups, POD_PLUGIN), PodCgroup::new(&cgroups, POD_C));
    // The kubelet root a mount point, as on a node: the plugin's runtime shares it.
    let (tree, ns) = (KubeletTree::new(), MountNs::new());
    let (root, scratch) = (tree.root(), tree.tmp.path().to_owned());
    ns.bind(&root, &root).unwrap();
    let published = Published::with_tree(tree, ns, "bidirectional", &syscall_backend(), &[]);
    let (ns, agent, a_target) = (&published.ns, &published.agent, &published.a_target);
    let pods = root.join("pods");

    // Each container as its runtime has made it before the pivot, with kubelet's `pods/`
    // bound: where the agent judges the bind with the namespace as it is (the scan leaves
    // a namespace whose root is still the node's).
    let copy_in = |rootfs: &Path| rootfs.join(a_target.strip_prefix("/").unwrap());
    let plugin_rootfs = scratch.join("rootfs-plugin");
    let driver = plugin.runtime_bound(ns, &plugin_rootfs, &pods, Some(&root));
    let table = MountTable::read(Path::new(&format!("/proc/{}/mountinfo", driver.pid()))).unwrap();
    let plugin_copy = copy_in(&plugin_rootfs);
    let copy = table.mounts.iter().find(|m| m.mount_point == plugin_copy);
    assert!(copy.is_some_and(|m| m.shared), "the plugin's copy is not shared: {copy:?}");
    // Another pod's container next (`HostToContainer`): its bind is judged after the
    // plugin's (one event loop, in order), and its copy detached.
    let c_rootfs = scratch.join("rootfs-c");
    let other = pod_c.runtime_bound(ns, &c_rootfs, &pods, None);
    let other_copy = copy_in(&c_rootfs);
    agent.wait_for_line("the other pod's copy detached", detached_at(&other_copy));
    let marker = |container: &Container, copy: &Path| std::fs::read_to_string(container.path(copy).join("marker")).ok();
    assert_eq!(marker(&other, &other_copy), None, "C reads A's data through its copy of kubelet's pods/");
    assert_eq!(marker(&driver, &plugin_copy).as_deref(), Some("pv-rwop"), "the plugin's Bidirectional copy was taken");
    let about_plugin = |l: &str| l.contains("CONFLICT") && l.contains(POD_PLUGIN);
    assert_eq!(agent.count_lines(about_plugin), 0, "the plugin's copy was reported");
    assert_eq!(published.marker(a_target).ok().as_deref(), Some("pv-rwop"), "A's own publish is left");
    drop((driver, other));
    published.finish(&[root.as_path()]);
}

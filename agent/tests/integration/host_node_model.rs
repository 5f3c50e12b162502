//! The node model end to end with a real agent: single-pod volumes from an inventory file
//! (no `--single-pod-volume`), ownership rebuilt after a restart, an inventory edit that
//! makes a mounted volume single-pod, a terminating owner, and an unmount no event named
//! corrected by reconciliation. Mode-agnostic: quarantine on a host without BPF LSM,
//! enforce in the VM, where the same tests run again.

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use nix::errno::Errno;
use serde_json::Value;

use crate::support::{
    have_root, http_get,
    kubelet::{Agent, KubeletTree, MountNs, agent_binary, pin_root, uninstall},
    skip,
};

/// Pods db-0 (uid pod-a) and db-1 (uid pod-b) in namespace shop; PV `pv-data` bound to
/// PVC shop/data with access mode `mode`; `terminating` marks db-0 as shutting down.
fn inventory(mode: &str, terminating: bool) -> String {
    format!(
        "\
pods:
  - {{uid: pod-a, namespace: shop, name: db-0, terminating: {terminating}, volumes: [{{name: data, persistentVolumeClaim: data}}]}}
  - {{uid: pod-b, namespace: shop, name: db-1, volumes: [{{name: data, persistentVolumeClaim: data}}]}}
persistentVolumes:
  - {{name: pv-data, accessModes: [{mode}], claimRef: shop/data, csi: {{driver: hostpath.csi.k8s.io, volumeHandle: h-1}}}}
persistentVolumeClaims:
  - {{namespace: shop, name: data, accessModes: [{mode}], volumeName: pv-data}}
"
    )
}

struct Node {
    tree: KubeletTree,
    ns: MountNs,
    pins: PathBuf,
    inventory: PathBuf,
    volume: PathBuf,
    a: PathBuf,
    b: PathBuf,
}

/// Where kubelet stages pv-data (`<driver>/<sha256(volume handle)>/globalmount`).
const STAGING: &str = "plugins/kubernetes.io/csi/hostpath.csi.k8s.io/0f0ea5f4b8fcbd0e4d8b4c4ac5a0ff9b1ea5fcd1e6b1d4a2f3a1b0c9d8e7f6a5/globalmount";

impl Node {
    /// The kubelet tree with pv-data staged as kubelet does it: a real tmpfs at its
    /// global mount, which the pods' publishes bind.
    fn new(test: &str, inventory_text: &str) -> Self {
        let tree = KubeletTree::new();
        let inventory = tree.tmp.path().join("inventory.yaml");
        std::fs::write(&inventory, inventory_text).unwrap();
        let ns = MountNs::new();
        let volume = tree.root().join(STAGING);
        std::fs::create_dir_all(&volume).unwrap();
        assert_eq!(ns.mount_tmpfs(&volume), Ok(()), "the staging mount");
        let (a, b) = (tree.publish_dir("pod-a", "pv-data"), tree.publish_dir("pod-b", "pv-data"));
        Self { ns, pins: pin_root(test), tree, inventory, volume, a, b }
    }

    fn agent(&self) -> Agent {
        let inventory = self.inventory.to_str().unwrap();
        let extra = ["--inventory", inventory, "--reconcile-interval", "200ms"];
        Agent::start_in(&self.ns, &self.tree.root(), &self.pins, &[], &extra)
    }

    /// Pod B publishes the volume pod A holds: refused (enforce) or detached and masked
    /// (quarantine), and explained naming the PVC and the owner.
    fn second_publish_is_stopped(&self, agent: &Agent) {
        let is_quarantine = |l: &str| l.contains("CONFLICT quarantined") && l.contains("pod-b");
        let quarantined = agent.count_lines(is_quarantine);
        match self.ns.bind(&self.volume, &self.b) {
            Err(Errno::EBUSY) => {
                agent.wait_for_line("the refusal", |l| l.contains("CONFLICT blocked") && l.contains("pod-b"));
            }
            Ok(()) => {
                agent.wait_for_more_lines("the quarantine", quarantined, is_quarantine);
                assert_eq!(self.ns.umount(&self.b), Ok(()), "remove the quarantine mask");
            }
            other => panic!("pod B's publish: {other:?}"),
        }
        agent.wait_for_line("the explanation", |l| {
            l.contains("on pod shop/db-1 (uid pod-b)") && l.contains("(PVC shop/data)") && l.contains("pod shop/db-0")
        });
    }

    /// Pod B's publish goes through and B becomes the owner.
    fn second_publish_claims(&self, agent: &Agent) {
        assert_eq!(self.ns.bind(&self.volume, &self.b), Ok(()), "pod B may publish now");
        match agent.mode().as_str() {
            "enforce" => assert!(pinned_owners(&self.pins).contains(&("pv-data".into(), "pod-b".into()))),
            _ => {
                agent.wait_for_line("B's claim", |l| l.contains("volume pv-data claimed by pod pod-b"));
            }
        }
    }

    fn finish(self, agent: Agent) {
        agent.stop();
        for target in [&self.a, &self.b, &self.volume] {
            while self.ns.umount(target).is_ok() {}
        }
        if self.pins.exists() {
            uninstall(&self.pins);
        }
    }
}

fn pinned_owners(pins: &Path) -> Vec<(String, String)> {
    let out = std::process::Command::new(agent_binary()).arg("owners").arg("--pin-root").arg(pins).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('\t').map(|(v, p)| (v.to_owned(), p.to_owned())))
        .collect()
}

/// pv-data as the debug API shows it: owner, pods it is published to, single-pod reason,
/// PVC. Before and after a restart these must be the same.
fn volume_view(agent: &Agent) -> Value {
    let (status, body) = http_get(&agent.address("debug API"), "/debug/volumes/pv-data");
    assert_eq!(status, 200, "{body}");
    let json: Value = serde_json::from_str(&body).unwrap();
    let v = &json["volume"];
    serde_json::json!([v["owner"], v["published_to"], v["single_pod"], v["claim"]])
}

/// What made the agent's view, and pv-data in that same view: `None` if the status read
/// before the volume and the one after name different builds.
fn view_with_its_refresh(agent: &Agent) -> Option<(String, Value)> {
    let status = || {
        let (code, body) = http_get(&agent.address("debug API"), "/debug/status");
        assert_eq!(code, 200, "{body}");
        let json: Value = serde_json::from_str(&body).unwrap();
        (json["updatedAt"].clone(), json["viewRefresh"].as_str().unwrap_or_default().to_owned())
    };
    let before = status();
    let view = volume_view(agent);
    (status() == before).then_some((before.1, view))
}

/// Polls `found` every 10 ms for up to 10 s, for what it finds.
fn eventually_some<T>(what: &str, found: impl Fn() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(found) = found() {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out after 10 s waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Polls `cond` every 10 ms for up to 10 s.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    eventually_some(what, || cond().then_some(()))
}

#[test]
fn inventory_single_pod_volumes_keep_their_owner_across_an_agent_restart() {
    if !have_root("inventory_single_pod_volumes_keep_their_owner_across_an_agent_restart") {
        return;
    }
    let node = Node::new("inv-restart", &inventory("ReadWriteOncePod", false));
    let agent = node.agent();
    agent.wait_for_line("the model", |l| l.contains("1 single-pod volumes (1 ReadWriteOncePod"));
    assert_eq!(node.ns.bind(&node.volume, &node.a), Ok(()), "pod A publishes first");
    node.second_publish_is_stopped(&agent);
    // The debug view is refreshed at most once a second.
    let owned_by_a = serde_json::json!(["pod-a", ["pod-a"], "ReadWriteOncePod", "shop/data"]);
    eventually("the model before the restart", || volume_view(&agent) == owned_by_a);
    agent.stop();

    // The restarted agent never saw A's publish: it rebuilds (or adopts) the owner.
    let agent = node.agent();
    agent.wait_for_line("the rebuilt owner", |l| {
        l.contains("volume pv-data is published for pod pod-a (mount table)")
            || l.contains("volume pv-data is owned by pod pod-a")
    });
    eventually("the same model after the restart", || volume_view(&agent) == owned_by_a);
    node.second_publish_is_stopped(&agent);
    node.finish(agent);
}

#[test]
fn a_volume_that_becomes_single_pod_while_mounted_is_owned_by_its_publisher() {
    if !have_root("a_volume_that_becomes_single_pod_while_mounted_is_owned_by_its_publisher") {
        return;
    }
    let node = Node::new("inv-reload", &inventory("ReadWriteOnce", false));
    let agent = node.agent();
    assert_eq!(node.ns.bind(&node.volume, &node.a), Ok(()), "a ReadWriteOnce publish: nobody owns it");

    // A broken edit is reported with line and field; the last good inventory stays.
    std::fs::write(&node.inventory, inventory("ReadWriteOncePod", false).replace("claimRef", "claimRf")).unwrap();
    agent.wait_for_line("the bad edit", |l| {
        l.contains("persistentVolumes[0].claimRf") && l.contains("line 5") && l.contains("last good inventory stays")
    });

    std::fs::write(&node.inventory, inventory("ReadWriteOncePod", false)).unwrap();
    agent.wait_for_line("the reload", |l| l.contains("inventory") && l.contains("reloaded"));
    agent.wait_for_line("the seeded owner", |l| l.contains("volume pv-data is published for pod pod-a (mount table)"));
    node.second_publish_is_stopped(&agent);
    node.finish(agent);
}

#[test]
fn a_terminating_owner_keeps_the_volume_until_its_unmount_then_the_replacement_gets_it() {
    if !have_root("a_terminating_owner_keeps_the_volume_until_its_unmount_then_the_replacement_gets_it") {
        return;
    }
    let node = Node::new("inv-terminating", &inventory("ReadWriteOncePod", true));
    let agent = node.agent();
    assert_eq!(node.ns.bind(&node.volume, &node.a), Ok(()));
    node.second_publish_is_stopped(&agent);
    assert_eq!(node.ns.umount(&node.a), Ok(()), "kubelet unmounts the terminating pod's volume");
    node.second_publish_claims(&agent);
    node.finish(agent);
}

#[test]
fn an_unmount_no_event_named_is_corrected_by_reconciliation() {
    if !have_root("an_unmount_no_event_named_is_corrected_by_reconciliation") {
        return;
    }
    let node = Node::new("inv-reconcile", &inventory("ReadWriteOncePod", false));
    let pod_a_dir = node.tree.root().join("pods/pod-a");
    // Pod A's directory is a mount of its own, the publish target a mount below it.
    assert_eq!(node.ns.bind(&pod_a_dir, &pod_a_dir), Ok(()));
    let agent = node.agent();
    assert_eq!(node.ns.bind(&node.volume, &node.a), Ok(()));
    node.second_publish_is_stopped(&agent);

    // One lazy unmount of pod A's directory takes the publish target with it; the only
    // event names pod A's directory, which is not a publish target.
    assert_eq!(node.ns.umount_detach(&pod_a_dir), Ok(()));
    let release = match agent.trace_backend().as_str() {
        // Mount notices name every mount the lazy unmount took: the notice releases.
        "fanotify" => "volume pv-data released: pod pod-a unmounted its publish target",
        _ => "volume pv-data released: pod pod-a's publish target has been missing from",
    };
    agent.wait_for_line("the release", |l| l.contains(release));
    eventually("the owner map to forget pod A", || {
        !pinned_owners(&node.pins).contains(&("pv-data".into(), "pod-a".into()))
    });
    node.second_publish_claims(&agent);
    node.finish(agent);
}

/// The id mountinfo shows for the top mount at `target` in `ns`.
fn table_id(ns: &MountNs, target: &Path) -> i32 {
    let info = std::fs::read_to_string(ns.mountinfo()).unwrap();
    let target = target.to_str().unwrap();
    let ids = info.lines().filter(|l| l.split(' ').nth(4) == Some(target));
    ids.filter_map(|l| l.split(' ').next()?.parse().ok()).next_back().expect("a mount at the target")
}

/// A second pod's publish made while no agent ran, whose mount the kernel gave a reused id
/// lower than the owner's (mountinfo's ids are recycled, lowest free first): the agent that
/// starts then still takes the first publisher for the owner, by the mounts' unique ids.
#[test]
fn a_publish_made_while_no_agent_ran_is_not_taken_for_the_owner_for_its_reused_lower_mount_id() {
    if !have_root("a_publish_made_while_no_agent_ran_is_not_taken_for_the_owner_for_its_reused_lower_mount_id") {
        return;
    }
    if volguard::sys::statmount::unique_mount_id(Path::new("/")).ok().flatten().is_none() {
        skip(
            "a_publish_made_while_no_agent_ran_is_not_taken_for_the_owner_for_its_reused_lower_mount_id",
            "this kernel gives no unique mount ids (statx STATX_MNT_ID_UNIQUE, Linux 6.8)",
        );
        return;
    }
    let node = Node::new("reused-id", &inventory("ReadWriteOncePod", false));
    // Mounts made before A's publish and gone after it leave lower ids free for B's.
    let scratch: Vec<PathBuf> = (0..4).map(|i| node.tree.tmp.path().join(format!("scratch-{i}"))).collect();
    for dir in &scratch {
        std::fs::create_dir_all(dir).unwrap();
        assert_eq!(node.ns.mount_tmpfs(dir), Ok(()));
    }
    assert_eq!(node.ns.bind(&node.volume, &node.a), Ok(()), "pod A publishes first");
    for dir in &scratch {
        assert_eq!(node.ns.umount(dir), Ok(()));
    }
    assert_eq!(node.ns.bind(&node.volume, &node.b), Ok(()), "pod B publishes while no agent runs");
    let (id_a, id_b) = (table_id(&node.ns, &node.a), table_id(&node.ns, &node.b));
    assert!(id_b < id_a, "the kernel did not reuse a lower id for B's publish ({id_b}, A's {id_a}): nothing to test");

    let agent = node.agent();
    agent.wait_for_line("B found sharing A's volume", |l| {
        l.contains("CONFLICT found") && l.contains("published into pod pod-b and, earlier, pod pod-a")
    });
    let owner = volume_view(&agent)[0].clone();
    assert_eq!(owner, "pod-a", "the owner after the start");
    assert_eq!(agent.count_lines(|l| l.contains("(mount table): pod pod-b owns it")), 0);
    node.finish(agent);
}

#[test]
fn the_debug_view_shows_the_last_owner_of_a_burst_of_publishes_without_waiting_for_the_tick() {
    if !have_root("the_debug_view_shows_the_last_owner_of_a_burst_of_publishes_without_waiting_for_the_tick") {
        return;
    }
    let node = Node::new("inv-burst", &inventory("ReadWriteOncePod", false));
    let agent = node.agent();
    agent.wait_for_line("the model", |l| l.contains("1 single-pod volumes (1 ReadWriteOncePod"));
    // Pod A publishes and unpublishes in a tight loop (each change of owner is copied to the
    // view at most once per `URGENT_GAP`), then pod B claims the released volume at once:
    // an owner the burst never had, so only a copy made after the burst can show it.
    for _ in 0..200 {
        assert_eq!(node.ns.bind(&node.volume, &node.a), Ok(()));
        assert_eq!(node.ns.umount(&node.a), Ok(()));
    }
    node.second_publish_claims(&agent);
    let owned_by_b = serde_json::json!(["pod-b", ["pod-b"], "ReadWriteOncePod", "shop/data"]);
    let refresh = eventually_some("the view to show B's claim", || {
        let (refresh, view) = view_with_its_refresh(&agent)?;
        (view == owned_by_b).then_some(refresh)
    });
    // Held back by the gap, B's claim is still copied when the gap ends (20 ms), by the
    // urgent copy's own timer, not at the loop's one-second tick: the view says which made
    // it. In enforce mode the kernel keeps the owners and the view follows the tick.
    if agent.mode() == "quarantine" {
        assert_eq!(refresh, "at-once", "the view that first shows B's claim was made by");
    }
    node.finish(agent);
}

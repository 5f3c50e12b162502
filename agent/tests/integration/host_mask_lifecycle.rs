//! Quarantine semantics on the host (root, no BPF LSM): whatever the timing of a driver's
//! two-step publish (a bind, then `bind,remount`), pod B's target ends with the mask and
//! nothing else; the mask goes with B's unpublish, or once B has left the facts; B's story
//! is told when the owner releases; start-up violations are recorded; and status, metrics,
//! the debug API and the CLI agree right after each step.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use serde_json::Value;
use volguard::model::mounts::MASK_SOURCE;

use crate::support::{
    have_root, http_get,
    kubelet::{Agent, KubeletTree, MountNs, agent_binary, pin_root, syscall_backend},
    pod_cgroup::PodCgroup,
    skip,
};

fn quarantine_runs_here(test: &str) -> bool {
    if !have_root(test) {
        return false;
    }
    if crate::support::agents_refuse_here() {
        skip(test, "the kernel refuses here (BPF LSM or fmod_ret): publishes are refused, never quarantined");
        return false;
    }
    true
}

/// Only the mask is left on `target`, and it is read-only (even after a remount that did
/// not ask for `ro`: the mask's superblock is read-only).
fn assert_mask_alone(ns: &MountNs, target: &Path, what: &str) {
    let stack = ns.mounts_at(target);
    assert_eq!(stack.len(), 1, "{what}: one mount on the target, not {stack:?}");
    assert_eq!((stack[0].0.as_str(), stack[0].1.as_str()), ("tmpfs", MASK_SOURCE), "{what}: the mask");
    assert_eq!(ns.write_in(target).map_err(|e| e.raw_os_error()), Err(Some(libc::EROFS)), "{what}: read-only");
}

// Long by design: each landing point of the quarantine is one step of the same publish.
#[test]
fn a_two_step_publish_ends_with_the_mask_alone_whenever_the_quarantine_lands() {
    if !quarantine_runs_here("a_two_step_publish_ends_with_the_mask_alone_whenever_the_quarantine_lands") {
        return;
    }
    let tree = KubeletTree::new();
    let ns = MountNs::new();
    let agent = Agent::start_in(&ns, &tree.root(), &pin_root("two-step"), &["pv-rwop"], &[]);
    let volume = tree.volume("pv-rwop");
    ns.bind(&volume, &tree.publish_dir("pod-a", "pv-rwop")).unwrap();
    agent.wait_for_line("the claim", |l| l.contains("volume pv-rwop claimed by pod pod-a"));

    let quarantined = |pod: &str| {
        let pod = format!("pod {pod} published");
        move |l: &str| l.contains("CONFLICT quarantined") && l.contains(&pod)
    };
    let unpublished = |pod: &str| {
        let pod = format!("pod {pod}'s target");
        move |l: &str| l.contains("removed by its unpublish") && l.contains(&pod)
    };
    // Every publish of pod-bN: both steps, then the driver's unpublish.
    let publish_and_tear_down = |n: usize, steps: &dyn Fn(&str, &Path) -> bool| -> bool {
        let pod = format!("pod-b{n}");
        let target = tree.publish_dir(&pod, "pv-rwop");
        let remounted = steps(&pod, &target);
        agent.wait_for_line("the quarantine", quarantined(&pod));
        assert_mask_alone(&ns, &target, &pod);
        ns.umount(&target).unwrap();
        assert_eq!(ns.mounts_at(&target), [], "{pod}: the driver's unpublish leaves nothing");
        agent.wait_for_line("the mask's end", unpublished(&pod));
        remounted
    };
    let mut n = 0;
    let mut next = || {
        n += 1;
        n
    };
    // The quarantine lands before the remount: the remount changes the mask's flags only.
    let remounted = publish_and_tear_down(next(), &|pod, target| {
        ns.bind(&volume, target).unwrap();
        agent.wait_for_line("the quarantine", quarantined(pod));
        ns.bind_remount(&volume, target).is_ok()
    });
    assert!(remounted, "a remount of the mask succeeds (and leaves it read-only)");
    // Timed sweep, the remount from at once to 4 ms after the bind: the quarantine lands
    // after it, between the detach and the mask (the remount fails), or before it. Which
    // one is read off the mask: a bind remount sets every per-mount flag it is given and
    // clears the others, so a mask that lost its `nosuid` took the remount (the quarantine
    // came first), and one that kept it was mounted after the remount had hit the bind.
    let mut orderings = std::collections::BTreeMap::<&str, usize>::new();
    for gap_us in (0..40).map(|i| i * 100) {
        let gap = Duration::from_micros(gap_us);
        let ordering = std::cell::Cell::new("");
        publish_and_tear_down(next(), &|pod, target| {
            let (bind, remount) = ns.two_step_publish(&volume, target, gap);
            bind.unwrap();
            agent.wait_for_line("the quarantine", quarantined(pod));
            let options = ns.top_mount_options(target).unwrap_or_default();
            ordering.set(match (remount.is_ok(), options.iter().any(|o| o == "nosuid")) {
                (false, _) => "between the detach and the mask",
                (true, true) => "remount, then quarantine",
                (true, false) => "quarantine, then remount",
            });
            remount.is_ok()
        });
        *orderings.entry(ordering.get()).or_default() += 1;
    }
    eprintln!("two-step sweep: {orderings:?}");
    for must in ["remount, then quarantine", "quarantine, then remount"] {
        assert!(orderings.contains_key(must), "the sweep never had \"{must}\": {orderings:?}");
    }
    // As mount-utils issues them: mount(8) twice, from another process. Whether the
    // remount wins the race is the timing's; the end state is asserted either way.
    for _ in 0..5 {
        publish_and_tear_down(next(), &|_, target| {
            let (source, target) = (volume.to_str().unwrap(), target.to_str().unwrap());
            assert!(ns.command("mount", &["--bind", source, target]).status.success());
            ns.command("mount", &["-o", "bind,remount,noexec", source, target]).status.success()
        });
    }
    agent.stop();
}

/// Pods db-0 (uid pod-a) and db-1 (uid pod-b) in namespace shop, both using PVC shop/data
/// bound to the ReadWriteOncePod PV pv-data; `b_deleted: true` marks db-1 as being deleted
/// (kubelet cannot finish deleting it while its target holds a mount).
fn inventory(b_deleted: bool) -> String {
    let b = format!(
        "  - {{uid: pod-b, namespace: shop, name: db-1, terminating: {b_deleted}, \
         volumes: [{{name: data, persistentVolumeClaim: data}}]}}\n"
    );
    format!(
        "\
pods:
  - {{uid: pod-a, namespace: shop, name: db-0, volumes: [{{name: data, persistentVolumeClaim: data}}]}}
{}persistentVolumes:
  - {{name: pv-data, accessModes: [ReadWriteOncePod], claimRef: shop/data, csi: {{driver: d.example, volumeHandle: h}}}}
persistentVolumeClaims:
  - {{namespace: shop, name: data, accessModes: [ReadWriteOncePod], volumeName: pv-data}}
",
        b
    )
}

/// What the four views say about pv-data, read one after the other.
#[derive(Debug, PartialEq, Eq)]
struct Views {
    /// `volguard status`: owned, shared, quarantined publishes.
    status: (u64, u64, u64),
    /// Metrics: `volguard_single_pod_volumes{state=owned|shared}`, `volguard_quarantined_publishes`.
    metrics: (u64, u64, u64),
    /// `/debug/volumes`: holders, quarantined pods.
    debug: (Vec<String>, Vec<String>),
    /// `volguard volumes --json`: the same lists, through the CLI.
    cli: (Vec<String>, Vec<String>),
}

fn read_views(agent: &Agent) -> Views {
    let (debug, metrics) = (agent.address("debug API"), agent.address("metrics"));
    let (_, body) = http_get(&debug, "/debug/status");
    let s: Value = serde_json::from_str(&body).unwrap();
    let n = |v: &Value| v.as_u64().unwrap_or(u64::MAX);
    let status = (n(&s["ownedVolumes"]), n(&s["sharedVolumes"]), n(&s["quarantinedPublishes"]));
    let (_, text) = http_get(&metrics, "/metrics");
    let sample = |name: &str| -> u64 {
        text.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse().ok()).unwrap_or(u64::MAX)
    };
    let metrics = (
        sample("volguard_single_pod_volumes{state=\"owned\"}"),
        sample("volguard_single_pod_volumes{state=\"shared\"}"),
        sample("volguard_quarantined_publishes"),
    );
    let lists = |volumes: &Value| -> (Vec<String>, Vec<String>) {
        let v = volumes.as_array().unwrap().iter().find(|v| v["name"] == "pv-data").cloned().unwrap_or_default();
        let list =
            |key: &str| v[key].as_array().into_iter().flatten().map(|p| p.as_str().unwrap().to_owned()).collect();
        (list("published_to"), list("quarantined"))
    };
    let (_, body) = http_get(&debug, "/debug/volumes");
    let debug_lists = lists(&serde_json::from_str::<Value>(&body).unwrap()["volumes"]);
    let out = Command::new(agent_binary()).args(["volumes", "--json", "--debug-address", &debug]).output().unwrap();
    let cli_lists = lists(&serde_json::from_slice::<Value>(&out.stdout).unwrap()["volumes"]);
    Views { status, metrics, debug: debug_lists, cli: cli_lists }
}

fn expect(owned: u64, shared: u64, quarantined: u64, holders: &[&str], masked: &[&str]) -> Views {
    let list = |pods: &[&str]| pods.iter().map(|p| p.to_string()).collect::<Vec<_>>();
    Views {
        status: (owned, shared, quarantined),
        metrics: (owned, shared, quarantined),
        debug: (list(holders), list(masked)),
        cli: (list(holders), list(masked)),
    }
}

/// The views, read until they match `want` for at most half a second (less than the
/// debug view's once-a-second refresh: a transition must show at once).
fn assert_views(agent: &Agent, want: Views, what: &str) {
    let deadline = Instant::now() + Duration::from_millis(500);
    loop {
        let seen = read_views(agent);
        if seen == want {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: the views say {seen:#?}, not {want:#?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn conflict_masks(agent: &Agent) -> Vec<(String, String)> {
    let (_, body) = http_get(&agent.address("debug API"), "/debug/conflicts");
    let json: Value = serde_json::from_str(&body).unwrap();
    let s = |v: &Value| v.as_str().unwrap_or("-").to_owned();
    json["conflicts"].as_array().unwrap().iter().map(|c| (s(&c["action"]), s(&c["mask"]))).collect()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct Node {
    tree: KubeletTree,
    ns: MountNs,
    inventory: PathBuf,
    volume: PathBuf,
}

impl Node {
    fn new() -> Self {
        let tree = KubeletTree::new();
        let file = tree.tmp.path().join("inventory.yaml");
        std::fs::write(&file, inventory(false)).unwrap();
        let volume = tree.volume("pv-data");
        Self { tree, ns: MountNs::new(), inventory: file, volume }
    }

    fn agent(&self, test: &str) -> Agent {
        self.agent_with(test, &[])
    }

    fn agent_with(&self, test: &str, more: &[&str]) -> Agent {
        let mut extra = vec!["--inventory", self.inventory.to_str().unwrap(), "--reconcile-interval", "300ms"];
        extra.extend_from_slice(more);
        Agent::start_in(&self.ns, &self.tree.root(), &pin_root(test), &[], &extra)
    }

    fn target(&self, pod: &str) -> PathBuf {
        self.tree.publish_dir(pod, "pv-data")
    }
}

#[test]
fn a_quarantined_publish_is_its_own_state_and_its_mask_goes_with_its_pod() {
    if !quarantine_runs_here("a_quarantined_publish_is_its_own_state_and_its_mask_goes_with_its_pod") {
        return;
    }
    let node = Node::new();
    // A mask left by an earlier agent, on the target of a pod no one lists any more.
    let orphan = node.target("pod-gone");
    node.ns
        .run({
            let orphan = orphan.clone();
            move || {
                nix::mount::mount(
                    Some(MASK_SOURCE),
                    &orphan,
                    Some("tmpfs"),
                    nix::mount::MsFlags::MS_RDONLY,
                    None::<&str>,
                )
            }
        })
        .unwrap();
    let agent = node.agent("mask-lifecycle");
    agent.wait_for_line("the namespace note", |l| l.contains("is mount namespace") && l.contains("the agent runs in"));
    wait_until("the orphan mask removed", || node.ns.mounts_at(&orphan).is_empty());
    agent.wait_for_line("the orphan's removal", |l| l.contains("pod pod-gone is gone or being deleted"));

    node.ns.bind(&node.volume, &node.target("pod-a")).unwrap();
    agent.wait_for_line("the claim", |l| l.contains("volume pv-data claimed by pod pod-a"));
    assert_views(&agent, expect(1, 0, 0, &["pod-a"], &[]), "right after the claim");

    node.ns.bind(&node.volume, &node.target("pod-b")).unwrap();
    agent.wait_for_line("the quarantine", |l| l.contains("CONFLICT quarantined") && l.contains("pod pod-b"));
    assert_views(&agent, expect(1, 0, 1, &["pod-a"], &["pod-b"]), "right after the quarantine");
    assert_eq!(conflict_masks(&agent), [("quarantined".into(), "masked".into())]);

    // The owner goes: the volume is free, and pod-b is told it must be recreated to get it.
    node.ns.umount(&node.target("pod-a")).unwrap();
    agent.wait_for_line("the notice", |l| l.contains("SinglePodVolumeReleased") && l.contains("shop/db-1"));
    assert_views(&agent, expect(0, 0, 1, &[], &["pod-b"]), "right after the release");
    assert_mask_alone(&node.ns, &node.target("pod-b"), "pod-b after the release");

    // pod-b is being deleted, and its driver's unpublish did nothing (as the upstream
    // hostpath driver after a failed remount): the mask goes, so kubelet can finish.
    std::fs::write(&node.inventory, inventory(true)).unwrap();
    wait_until("pod-b's mask removed", || node.ns.mounts_at(&node.target("pod-b")).is_empty());
    agent.wait_for_line("the removal", |l| l.contains("pod pod-b is gone or being deleted"));
    wait_until("every view agrees", || read_views(&agent) == expect(0, 0, 0, &[], &[]));
    assert_eq!(conflict_masks(&agent), [("quarantined".into(), "cleared".into())]);
    assert!(std::fs::remove_dir(node.target("pod-b")).is_ok(), "kubelet can remove the directory now");
    let (_, metrics) = http_get(&agent.address("metrics"), "/metrics");
    assert!(metrics.contains("volguard_quarantine_masks_removed_total{reason=\"pod_gone\"} 2"), "{metrics}");
    agent.stop();
}

#[test]
fn two_pods_holding_a_volume_that_becomes_single_pod_are_reported_once() {
    if !have_root("two_pods_holding_a_volume_that_becomes_single_pod_are_reported_once") {
        return;
    }
    let node = Node::new();
    let read_write_once = inventory(false).replace("ReadWriteOncePod", "ReadWriteOnce");
    std::fs::write(&node.inventory, &read_write_once).unwrap();
    node.ns.bind(&node.volume, &node.target("pod-a")).unwrap();
    node.ns.bind(&node.volume, &node.target("pod-b")).unwrap();
    let agent = node.agent("becomes-single-pod");
    // As when the API's first list arrives after the start: the facts make it single-pod.
    std::fs::write(&node.inventory, inventory(false)).unwrap();
    agent.wait_for_line("the Event", |l| l.contains("SinglePodVolumeShared") && l.contains("shop/db-1"));
    std::thread::sleep(Duration::from_millis(1500)); // another inventory poll and reconciliations
    assert_eq!(conflict_masks(&agent), [("observed".into(), "-".into())], "reported once");
    for pod in ["pod-a", "pod-b"] {
        node.ns.umount(&node.target(pod)).unwrap();
    }
    agent.stop();
}

#[test]
fn two_pods_holding_a_volume_at_start_up_are_a_recorded_counted_explained_conflict() {
    if !have_root("two_pods_holding_a_volume_at_start_up_are_a_recorded_counted_explained_conflict") {
        return;
    }
    let node = Node::new();
    node.ns.bind(&node.volume, &node.target("pod-a")).unwrap();
    node.ns.bind(&node.volume, &node.target("pod-b")).unwrap();
    let agent = node.agent("startup-violation");
    agent.wait_for_line("the Event", |l| l.contains("SinglePodVolumeShared") && l.contains("shop/db-1"));
    assert_eq!(conflict_masks(&agent), [("observed".into(), "-".into())]);
    let (_, metrics) = http_get(&agent.address("metrics"), "/metrics");
    let observed = "volguard_conflicts_total{namespace=\"shop\",persistentvolumeclaim=\"data\",action=\"observed\",route=\"publish\"} 1";
    assert!(metrics.contains(observed), "{metrics}");
    assert_eq!(node.ns.mounts_at(&node.target("pod-b")).len(), 1, "a running pod's mount is left alone");
    for pod in ["pod-a", "pod-b"] {
        node.ns.umount(&node.target(pod)).unwrap();
    }
    agent.stop();
}

#[test]
fn a_conflict_names_the_process_and_the_pod_that_made_the_mount() {
    if !quarantine_runs_here("a_conflict_names_the_process_and_the_pod_that_made_the_mount") {
        return;
    }
    let Some(root) = PodCgroup::hierarchy("a_conflict_names_the_process_and_the_pod_that_made_the_mount") else {
        return;
    };
    // A CSI driver's pod, as kubelet's cgroupfs driver names its cgroup.
    let driver_uid = format!("0c3c2d5e-{:04x}-4a6e-9f00-0000000000d1", std::process::id() & 0xffff);
    let pod_cgroup = PodCgroup::new(&root, &driver_uid);
    let node = Node::new();
    // Only a traced syscall names its caller.
    let agent = node.agent_with("mounted-by", &syscall_backend());
    node.ns.bind(&node.volume, &node.target("pod-a")).unwrap();
    agent.wait_for_line("the claim", |l| l.contains("volume pv-data claimed by pod pod-a"));
    // mount(8) run from inside the driver's pod cgroup, and gone when the agent looks.
    let (volume, target) = (node.volume.to_str().unwrap(), node.target("pod-b"));
    let script =
        format!("echo $$ > {} && exec mount --bind {volume} {}", pod_cgroup.procs().display(), target.display());
    let out = node.ns.command("sh", &["-c", &script]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    agent.wait_for_line("the quarantine", |l| l.contains("CONFLICT quarantined") && l.contains("pod pod-b"));
    let event = agent.wait_for_line("the Event", |l| l.contains("SinglePodVolumeQuarantined"));
    assert!(
        event.contains("The mount was made by pid ") && event.contains(&format!("(mount) in pod uid {driver_uid}")),
        "{event}"
    );
    let (_, body) = http_get(&agent.address("debug API"), "/debug/conflicts");
    let by = &serde_json::from_str::<Value>(&body).unwrap()["conflicts"][0]["by"];
    assert_eq!((by["command"].as_str(), by["pod"]["uid"].as_str()), (Some("mount"), Some(driver_uid.as_str())), "{by}");
    let conflicts = Command::new(agent_binary())
        .args(["conflicts", "--debug-address", &agent.address("debug API")])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&conflicts.stdout);
    assert!(table.contains("MOUNTED-BY") && table.contains("mount[") && table.contains(&driver_uid), "{table}");
    agent.stop();
    for pod in ["pod-a", "pod-b"] {
        let _ = node.ns.umount(&node.target(pod));
    }
}

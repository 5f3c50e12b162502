//! What volguard said while the suite ran with it (its conflicts, views, masks and Events,
//! polled), and the verdict: the same specs passed with and without it, and it reported
//! nothing but the single-pod volume the ReadWriteOncePod specs share on purpose.

use super::*;

/// The agent's mode (`volguard_enforcement_mode`), from its own metrics endpoint.
pub(super) fn agent_mode(on: SuiteNode) -> anyhow::Result<String> {
    let text = metrics_text(on)?;
    text.lines()
        .filter(|l| l.starts_with("volguard_enforcement_mode{") && l.ends_with(" 1"))
        .find_map(|l| l.split("mode=\"").nth(1).and_then(|r| r.split('"').next()).map(str::to_owned))
        .context("the agent's metrics have no volguard_enforcement_mode 1")
}

/// The agent's metrics endpoint (the chart's metricsPort): on the node here, or the VM's,
/// which qemu forwards from the guest's address.
fn metrics_text(on: SuiteNode) -> anyhow::Result<String> {
    let address = match on {
        SuiteNode::Host => "127.0.0.1",
        SuiteNode::Vm => GUEST_IP,
    };
    output(Command::new("curl").args(["-sf", &format!("http://{address}:{METRICS_PORT}/metrics")]))
}

/// The agent's own count of what volguard did: conflicts by action, and masks removed.
pub(super) fn metrics(on: SuiteNode) -> anyhow::Result<BTreeMap<String, f64>> {
    let mut sums = BTreeMap::new();
    for line in metrics_text(on)?.lines() {
        let name = line.split(['{', ' ']).next().unwrap_or_default();
        if ["volguard_conflicts_total", "volguard_quarantine_masks_removed_total", "volguard_quarantined_publishes"]
            .contains(&name)
            && let Some(value) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok())
        {
            *sums.entry(name.to_owned()).or_default() += value;
        }
    }
    Ok(sums)
}

/// What the agent said while the suite ran with it, polled every two seconds: its
/// conflicts (debug API), its view of every single-pod volume (debug API), the node's
/// quarantine masks (the mount table) and volguard's Events in every namespace (the
/// specs' namespaces, and their Events, are deleted when each spec ends).
#[derive(Debug, Default)]
pub(super) struct Seen {
    conflicts: BTreeSet<String>,
    masks: BTreeSet<String>,
    events: BTreeSet<String>,
    /// By single-pod volume: its claim, and each distinct view of it in order.
    single_pod: BTreeMap<String, (String, Vec<String>)>,
    polls: usize,
    errors: BTreeSet<String>,
}

impl Seen {
    pub(super) fn to_json(&self) -> Value {
        json!({
            "polls": self.polls,
            "conflicts": self.conflicts,
            "masks": self.masks,
            "events": self.events,
            "single_pod_volumes": self.single_pod.iter().map(|(v, (claim, views))| json!({"volume": v, "claim": claim, "views": views})).collect::<Vec<_>>(),
            "poll_errors": self.errors,
        })
    }
}

pub(super) struct Observer {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Seen>,
}

impl Observer {
    pub(super) fn start(kubeconfig: PathBuf, on: SuiteNode) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let admin = Kube { kubeconfig };
            let seen = Mutex::new(Seen::default());
            while !stopped.load(Ordering::Relaxed) {
                let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                if let Err(e) = poll(&admin, on, &mut s) {
                    s.errors.insert(format!("{e:#}"));
                }
                s.polls += 1;
                drop(s);
                std::thread::sleep(Duration::from_secs(2));
            }
            // A last look after the suite ended.
            let mut s = seen.into_inner().unwrap_or_else(|e| e.into_inner());
            if let Err(e) = poll(&admin, on, &mut s) {
                s.errors.insert(format!("{e:#}"));
            }
            s
        });
        Self { stop, thread }
    }

    pub(super) fn stop(self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// One view of the agent's debug API, which listens on its node's loopback only: with
/// curl on the node here, with the agent's CLI in its pod on the VM's (the same JSON).
fn debug_api(admin: &Kube, on: SuiteNode, view: &str) -> anyhow::Result<Value> {
    let text = match on {
        SuiteNode::Host => {
            let limit = if view == "conflicts" { "?limit=256" } else { "" };
            output(Command::new("curl").args(["-sf", &format!("http://127.0.0.1:9729/debug/{view}{limit}")]))?
        }
        SuiteNode::Vm => {
            let pod = agent_pod(admin, on.name())?;
            admin.run(&["exec", "-n", AGENT_NS, &pod, "--", AGENT_IN_IMAGE, view, "--json"])?
        }
    };
    serde_json::from_str(&text).with_context(|| format!("the agent's {view} view is not JSON"))
}

/// The quarantine masks on the node: its mount table here; on the VM's, the kubelet
/// root as the driver's container sees it (mounted Bidirectional, every mount under
/// kubelet's root, a mask included, propagates into it).
fn node_masks(admin: &Kube, on: SuiteNode) -> anyhow::Result<Vec<String>> {
    match on {
        SuiteNode::Host => masks(),
        SuiteNode::Vm => Ok(masks_in(&admin.run(&[
            "exec",
            &format!("{}-0", hostpath_driver::PLUGIN),
            "-c",
            hostpath_driver::PLUGIN_CONTAINER,
            "--",
            "cat",
            "/proc/self/mountinfo",
        ])?)),
    }
}

fn poll(admin: &Kube, on: SuiteNode, seen: &mut Seen) -> anyhow::Result<()> {
    for conflict in debug_api(admin, on, "conflicts")?["conflicts"].as_array().into_iter().flatten() {
        seen.conflicts.insert(conflict.to_string());
    }
    for volume in debug_api(admin, on, "volumes")?["volumes"].as_array().into_iter().flatten() {
        // Why the volume is single-pod (ReadWriteOncePod, Annotated, CommandLine), or null.
        let Some(reason) = volume["single_pod"].as_str() else { continue };
        let name = |uid: &Value| -> String {
            let uid = uid.as_str().unwrap_or_default();
            volume["pod_names"][uid].as_str().unwrap_or(uid).to_owned()
        };
        let names = |list: &Value| list.as_array().into_iter().flatten().map(name).collect::<Vec<_>>().join(",");
        let view = format!(
            "single-pod ({reason}), {}, owner {}, published to [{}], quarantined [{}]",
            volume["state"].as_str().unwrap_or("?"),
            if volume["owner"].is_null() { "none".to_owned() } else { name(&volume["owner"]) },
            names(&volume["published_to"]),
            names(&volume["quarantined"]),
        );
        // The claim serialises as `namespace/name`.
        let claim = volume["claim"].as_str().unwrap_or("?").to_owned();
        let entry =
            seen.single_pod.entry(volume["name"].as_str().unwrap_or("?").to_owned()).or_insert((claim, Vec::new()));
        if entry.1.last() != Some(&view) {
            entry.1.push(view);
        }
    }
    seen.masks.extend(node_masks(admin, on)?);
    let events = admin.get_json(&["events.v1.events.k8s.io", "-A"])?;
    for event in events["items"].as_array().into_iter().flatten().filter(|e| e["reportingController"] == "volguard") {
        seen.events.insert(format!(
            "{}/{}: {} {}",
            event["regarding"]["namespace"].as_str().unwrap_or_default(),
            event["regarding"]["name"].as_str().unwrap_or_default(),
            event["reason"].as_str().unwrap_or_default(),
            event["note"].as_str().unwrap_or_default()
        ));
    }
    Ok(())
}

pub(super) struct Verdict {
    pub(super) lines: Vec<String>,
    pub(super) problems: Vec<String>,
}

/// The namespaces of the ReadWriteOncePod testsuite's specs (the framework's base name).
const RWOP_NAMESPACE: &str = "read-write-once-pod-";

pub(super) fn compare(
    without: &Outcome,
    with: &Outcome,
    seen: &Seen,
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    mode: &str,
) -> Verdict {
    let mut lines =
        vec![format!("without volguard: {}", without.summary()), format!("with volguard ({mode}): {}", with.summary())];
    let mut problems = Vec::new();
    for spec in without.passed.difference(&with.passed) {
        problems.push(format!("passes without volguard, not with it: {spec}"));
    }
    for spec in with.passed.difference(&without.passed) {
        problems.push(format!("passes with volguard, not without it: {spec}"));
    }
    for (spec, why) in &without.failed {
        problems.push(format!("fails without volguard (this node or the suite, not volguard): {spec}: {why}"));
    }
    if with.passed.is_empty() {
        problems.push("no spec passed".into());
    }
    // No spec of these testsuites but the ReadWriteOncePod ones shares a single-pod
    // volume, and those kubelet refuses before any CSI call: volguard has nothing to stop.
    for conflict in &seen.conflicts {
        problems.push(format!("volguard reported a conflict: {conflict}"));
    }
    for mask in &seen.masks {
        problems.push(format!("a quarantine mask on the node: {mask}"));
    }
    for event in &seen.events {
        problems.push(format!("volguard's Event: {event}"));
    }
    for name in
        ["volguard_conflicts_total", "volguard_quarantine_masks_removed_total", "volguard_quarantined_publishes"]
    {
        let (b, a) = (before.get(name).copied().unwrap_or(0.0), after.get(name).copied().unwrap_or(0.0));
        lines.push(format!("{name}: {b} before, {a} after"));
        if a != b {
            problems.push(format!("{name} went from {b} to {a}"));
        }
    }
    if seen.polls < 2 || !seen.errors.is_empty() {
        problems.push(format!("the observer polled {} times; errors: {:?}", seen.polls, seen.errors));
    }
    // The ReadWriteOncePod volumes: volguard must know each as single-pod, with one owner
    // and never a second pod published or quarantined.
    let rwop: Vec<_> = seen.single_pod.iter().filter(|(_, (claim, _))| claim.starts_with(RWOP_NAMESPACE)).collect();
    let rwop_specs = with.passed.iter().filter(|s| s.contains("read-write-once-pod")).count();
    if rwop_specs > 0 && rwop.len() < rwop_specs {
        problems.push(format!(
            "{rwop_specs} read-write-once-pod specs passed, volguard saw {} of their volumes as single-pod",
            rwop.len()
        ));
    }
    for (volume, (claim, views)) in &rwop {
        lines.push(format!("volguard on {volume} ({claim}), ReadWriteOncePod:"));
        for view in views {
            lines.push(format!("  {view}"));
            if published_twice(view) {
                problems.push(format!("volguard saw {volume} published to two pods: {view}"));
            }
            if !view.contains("quarantined []") {
                problems.push(format!("volguard quarantined a pod on {volume}: {view}"));
            }
        }
        if !views.iter().any(|v| !v.contains("owner none")) {
            problems.push(format!("volguard never named an owner of {volume} ({claim})"));
        }
    }
    let other: Vec<_> = seen.single_pod.iter().filter(|(_, (claim, _))| !claim.starts_with(RWOP_NAMESPACE)).collect();
    if !other.is_empty() {
        lines.push(format!(
            "other single-pod volumes volguard saw (ReadWriteOncePod claims of other testsuites): {}",
            other.len()
        ));
    }
    Verdict { lines, problems }
}

/// Whether a view lists more than one pod in "published to [...]".
fn published_twice(view: &str) -> bool {
    view.split("published to [").nth(1).and_then(|r| r.split(']').next()).is_some_and(|list| list.contains(','))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The real archive of ../shared/upstream, as the run reads it.
    #[test]
    fn upstream_test_driver_is_changed_only_as_documented() {
        let driver = test_driver(NODE_NAME).unwrap();
        let capabilities = driver["DriverInfo"]["Capabilities"].as_object().unwrap();
        assert!(!capabilities.contains_key("snapshotDataSource"), "no snapshotter is deployed");
        assert_eq!(capabilities["readWriteOncePod"], true);
        for kept in ["block", "persistence", "multipods", "exec", "singleNodeVolume", "controllerExpansion", "topology"]
        {
            assert_eq!(capabilities[kept], true, "{kept} is upstream's and stays");
        }
        assert_eq!(driver["ClientNodeName"], NODE_NAME);
        assert_eq!(driver["StorageClass"]["FromName"], true, "the suite makes its StorageClasses, as upstream's CI");
        assert_eq!(driver["InlineVolumes"][0]["shared"], true, "CSI inline volumes stay described");
    }

    #[test]
    fn the_suite_is_built_from_the_nodes_kubernetes() {
        let suite = go::required_version(&module(), "k8s.io/kubernetes").unwrap();
        assert_eq!(suite, pinned_version("k8s.io/kubernetes").unwrap());
    }

    #[test]
    fn focus_and_skip_pick_the_chosen_specs() {
        let matches = |regex: &str, text: &str| regex::Regex::new(regex).unwrap().is_match(text);
        let spec = |pattern: &str, suite: &str, leaf: &str| {
            format!("External Storage [Driver: {DRIVER}] [Testpattern: {pattern}] {suite} {leaf}")
        };
        let rwop = spec("Dynamic PV (default fs)", "read-write-once-pod", "should preempt lower priority pods");
        let subpath = spec("Inline-volume (default fs)", "subPath", "should support existing directory");
        let volumes = spec("Dynamic PV (block volmode)", "volumes", "should store data");
        // As e2e.test --ginkgo.dry-run prints them (v1.34.4).
        let different = spec(
            "Dynamic PV (xfs)] [Slow",
            "multiVolume [Slow]",
            "should access to two volumes with the same volume mode and retain data across pod recreation on \
             different node [Slow]",
        );
        let multi = spec(
            "Dynamic PV (xfs)] [Slow",
            "multiVolume [Slow]",
            "should access to two volumes with the same volume mode and retain data across pod recreation on the \
             same node [Slow]",
        );
        let slow_subpath = spec(
            "Dynamic PV (default fs)",
            "subPath",
            "should support restarting containers using directory as subpath [Slow] [Slow]",
        );
        let disruptive = spec(
            "Dynamic PV (default fs)",
            "subPath",
            "should unmount if pod is gracefully deleted while kubelet is down [Disruptive] [Slow] [LinuxOnly] \
             [Disruptive, Slow, LinuxOnly]",
        );
        let (ci, full) = (SuiteSet::Ci, SuiteSet::Full);
        assert!(matches(&focus(ci), &rwop) && matches(&focus(ci), &subpath) && matches(&focus(ci), &multi));
        assert!(!matches(&focus(ci), &volumes) && matches(&focus(full), &volumes));
        assert!(matches(&skip(full), &different) && matches(&skip(full), &disruptive));
        assert!(matches(&skip(ci), &slow_subpath) && !matches(&skip(full), &slow_subpath));
        assert!(!matches(&skip(ci), &multi) && !matches(&skip(ci), &rwop) && !matches(&skip(full), &volumes));
        let guard = SuiteSet::Guard;
        assert!(matches(&focus(guard), &rwop) && matches(&focus(guard), &subpath) && !matches(&focus(guard), &multi));
        assert!(matches(&skip(guard), &slow_subpath) && !matches(&skip(guard), &rwop));
    }
}

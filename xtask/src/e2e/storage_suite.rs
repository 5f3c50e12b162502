//! Kubernetes' own storage e2e suite against csi-driver-host-path, with and without
//! volguard (`cargo xtask e2e --storage-suite ci|full`).
//!
//! `e2e.test` is built from `k8s.io/kubernetes/test/e2e` of the same release as the node
//! (`e2e/storage-suite/go.mod`, a module of its own: the test binary needs modules the
//! node's binaries do not), with ginkgo's CLI (to run the specs in parallel) and agnhost
//! (the image several specs run), into [`SUITE_DIR`]; a re-run with the same inputs
//! skips the build. The External Storage testsuites then run against
//! `hostpath.csi.k8s.io`, described by upstream's own `test-driver.yaml`, read from the
//! release archive at run time: twice on the same node, first without volguard, then
//! with volguard installed from its chart. Passed when the same specs pass both times and
//! volguard reported no conflict, quarantine or mask while they ran, and, in the
//! ReadWriteOncePod testsuite (whose specs share a single-pod volume on purpose), its
//! views named the volume single-pod with kubelet's first pod as its owner.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
    process::Command,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use serde_json::{Value, json};

use super::{
    NODE_NAME,
    components::pinned_version,
    hostpath_driver::{self, DRIVER},
    kube::Kube,
    node::Node,
    suite_files::{SUITE_DIR, TEST_IMAGES, bin},
    upstream,
    workload::{Chart, install_volguard, masks},
};
use crate::{
    go::{self, Stamp},
    proc::{output, run_logged, workspace_root},
};

/// The module that pins the test binary's sources, relative to the workspace.
const MODULE_DIR: &str = "e2e/storage-suite";
/// The module of the suite's pod network's CNI plugins, relative to the workspace.
const CNI_MODULE_DIR: &str = "e2e/storage-suite/cni";
/// What the build leaves: the test binary, ginkgo's CLI, agnhost, and the CNI plugins of
/// the pods' network.
const BINARIES: &[&str] = &["e2e.test", "ginkgo", "agnhost", "bridge", "host-local"];

fn module() -> PathBuf {
    workspace_root().join(MODULE_DIR)
}

/// Builds e2e.test, ginkgo and agnhost unless a build from the same inputs is there.
pub fn ensure() -> anyhow::Result<()> {
    let kubernetes = go::required_version(&module(), "k8s.io/kubernetes")?;
    let node = pinned_version("k8s.io/kubernetes")?;
    ensure!(kubernetes == node, "{MODULE_DIR}/go.mod requires k8s.io/kubernetes {kubernetes}, the node {node}");
    let minor = kubernetes.trim_start_matches('v').split('.').nth(1).unwrap_or("0").to_owned();
    // The version stamps of a release build, as the node's (components.rs).
    let ldflags = format!(
        "-s -w -X k8s.io/component-base/version.gitVersion={kubernetes} \
         -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor={minor} \
         -X k8s.io/component-base/version.gitTreeState=clean"
    );
    let sums =
        output(Command::new("sha256sum").current_dir(module()).args(["go.mod", "go.sum", "cni/go.mod", "cni/go.sum"]))?;
    let stamp = Stamp {
        file: Path::new(SUITE_DIR).join("build.stamp"),
        inputs: format!("{sums}ldflags: {ldflags}\n{}", go::version()?),
    };
    let outputs: Vec<PathBuf> = BINARIES.iter().map(|b| bin(b)).collect();
    if stamp.is_current(&outputs) {
        println!("e2e: Kubernetes {kubernetes}'s e2e.test, ginkgo and agnhost present in {SUITE_DIR}");
        return Ok(());
    }
    println!("e2e: building e2e.test, ginkgo and agnhost from k8s.io/kubernetes {kubernetes} (cold: about 10 minutes)");
    let started = Instant::now();
    stamp.clear();
    let out = Path::new(SUITE_DIR).join("bin");
    fs::create_dir_all(&out)?;
    let go = |args: &[&str]| -> anyhow::Result<Command> {
        let mut cmd = go::go(&module())?;
        cmd.env("GOFLAGS", "-mod=mod").args(args);
        Ok(cmd)
    };
    let e2e_test = bin("e2e.test").display().to_string();
    // -vet=off: for a test binary go runs vet over the package and every dependency
    // first (over 15 minutes here); this builds the suite, it does not test it.
    run_logged(
        &mut go(&[
            "test",
            "-c",
            "-vet=off",
            "-trimpath",
            "-ldflags",
            &ldflags,
            "-o",
            &e2e_test,
            "k8s.io/kubernetes/test/e2e",
        ])?,
        "e2e: building e2e.test",
        "setup/e2e.test",
    )?;
    let out_arg = format!("{}/", out.display());
    run_logged(
        &mut go(&[
            "build",
            "-trimpath",
            "-ldflags",
            "-s -w",
            "-o",
            &out_arg,
            "github.com/onsi/ginkgo/v2/ginkgo",
            "k8s.io/kubernetes/test/images/agnhost",
        ])?,
        "e2e: building ginkgo and agnhost",
        "setup/ginkgo-agnhost",
    )?;
    // The CNI plugins: every tool of their own module.
    let mut cni = go::go(&workspace_root().join(CNI_MODULE_DIR))?;
    run_logged(
        cni.env("GOFLAGS", "-mod=mod").args(["build", "-trimpath", "-ldflags", "-s -w", "-o", &out_arg, "tool"]),
        "e2e: building the CNI plugins",
        "setup/cni",
    )?;
    for output in &outputs {
        ensure!(output.is_file(), "the build left no {}", output.display());
    }
    println!("e2e: e2e.test, ginkgo and agnhost built in {:.0} s", started.elapsed().as_secs_f64());
    stamp.write()
}

/// Which testsuites run: `ci` the subset `cargo xtask test` runs, `full` the whole chosen set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SuiteSet {
    Ci,
    Full,
}

impl SuiteSet {
    /// The External Storage testsuites (by the names Kubernetes gives them) of this set.
    pub fn testsuites(self) -> &'static [&'static str] {
        match self {
            Self::Full => FULL,
            Self::Ci => CI,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Ci => "ci",
            Self::Full => "full",
        }
    }
}

/// The testsuites that matter to volguard and fit this 2-core node: every way a pod
/// gets a CSI volume (PV, generic ephemeral, CSI inline; filesystem and block), subPath
/// binds of it, ownership changes, several pods and several volumes at once, and the
/// ReadWriteOncePod access mode, the only one whose specs share a single-pod volume on
/// purpose.
const FULL: &[&str] = &[
    "read-write-once-pod",
    "subPath",
    "volumes",
    "ephemeral",
    "fsgroupchangepolicy",
    "volumeMode",
    "multiVolume",
    "provisioning",
    "volumeIO",
];

/// What `cargo xtask test` runs (its budget is about 10 minutes for this step): the
/// ReadWriteOncePod testsuite (the single-pod volumes kubelet itself guards, where
/// volguard must agree with kubelet), subPath (kubelet's own bind mounts of a volume,
/// the mounts volguard must never take for a second pod's), ephemeral (generic and CSI
/// inline: volumes without a claim of their own), and multiVolume (several pods on one
/// volume, several volumes in one pod), without the `[Slow]` specs of the first three.
const CI: &[&str] = &["read-write-once-pod", "subPath", "ephemeral", "multiVolume"];

/// Specs left out of both sets, each with why (ginkgo `--skip` regular expressions).
pub const SKIPPED: &[(&str, &str)] = &[
    (r"\[Disruptive\]", "they restart or kill kubelet and the driver (scenario 2 restarts kubelet under volguard)"),
    (r"\[Serial\]", "they need the cluster to themselves; the specs run in parallel here"),
    (
        r"\[Feature:",
        "features a default cluster does not enable (csi-driver-host-path's own CI skips them too), e.g. SELinux \
         mounts and VolumeAttributesClass",
    ),
    (r"different node|multiple nodes", "this cluster has one node"),
];

/// Left out of the `ci` set only: the `[Slow]` specs of its testsuites but multiVolume,
/// which is `[Slow]` as a whole testsuite. The `full` set runs every `[Slow]` spec, as
/// csi-driver-host-path's own CI does (multiVolume and volumeIO are `[Slow]` throughout).
const CI_SKIPPED: (&str, &str) = (
    r"\] (read-write-once-pod|subPath|ephemeral) .*\[Slow\]",
    "[Slow] specs of the ci set's testsuites but multiVolume (the step's time budget)",
);

/// Every `--skip` expression of `set`, with why.
pub fn skipped(set: SuiteSet) -> Vec<(&'static str, &'static str)> {
    let mut all = SKIPPED.to_vec();
    if set == SuiteSet::Ci {
        all.push(CI_SKIPPED);
    }
    all
}

/// ginkgo's `--focus`: the External Storage specs of the driver in the set's testsuites.
fn focus(set: SuiteSet) -> String {
    format!(r"External.Storage \[Driver: {}\].*\] ({}) ", DRIVER.replace('.', r"\."), set.testsuites().join("|"))
}

fn skip(set: SuiteSet) -> String {
    skipped(set).iter().map(|(regex, _)| *regex).collect::<Vec<_>>().join("|")
}

/// The file in the release archive that describes this deployment to the suite.
const TEST_DRIVER: &str = "deploy/kubernetes-1.34/test-driver.yaml";

/// upstream's test-driver.yaml, changed only where this node's deployment differs from
/// upstream's, each said here and in docs/testing.md:
/// - `snapshotDataSource` removed: the snapshotter, its CRDs and its controller are not
///   deployed (upstream.rs's DEPLOYED).
/// - `readWriteOncePod` added: the driver supports ReadWriteOncePod (it advertises
///   SINGLE_NODE_MULTI_WRITER and refuses a second SINGLE_NODE_SINGLE_WRITER publish
///   since v1.11), but upstream's file does not say so, and Kubernetes' read-write-once-pod
///   testsuite skips a driver without the capability.
/// - `ClientNodeName` set to this node, as upstream's deploy-hostpath.sh appends it for
///   its CI.
fn test_driver() -> anyhow::Result<Value> {
    use serde::Deserialize;
    let text = upstream::source("csi-driver-host-path")?.read(TEST_DRIVER)?;
    let mut driver = Value::deserialize(serde_yaml_ng::Deserializer::from_str(&text))
        .with_context(|| format!("{TEST_DRIVER} is not YAML"))?;
    ensure!(driver["DriverInfo"]["Name"] == DRIVER, "{TEST_DRIVER} describes {}", driver["DriverInfo"]["Name"]);
    let capabilities = driver["DriverInfo"]["Capabilities"]
        .as_object_mut()
        .with_context(|| format!("{TEST_DRIVER}: no Capabilities"))?;
    ensure!(capabilities.remove("snapshotDataSource").is_some(), "{TEST_DRIVER} no longer names snapshotDataSource");
    capabilities.insert("readWriteOncePod".into(), json!(true));
    driver["ClientNodeName"] = json!(NODE_NAME);
    Ok(driver)
}

/// Every spec's outcome in one run, by its full text.
#[derive(Debug, Default)]
struct Outcome {
    passed: BTreeSet<String>,
    failed: BTreeMap<String, String>,
    skipped: BTreeSet<String>,
    seconds: f64,
}

impl Outcome {
    fn summary(&self) -> String {
        format!(
            "{} passed, {} failed, {} skipped at run time, {:.0} s",
            self.passed.len(),
            self.failed.len(),
            self.skipped.len(),
            self.seconds
        )
    }
}

/// How many specs run at once: ginkgo processes. The specs mostly wait (pods starting,
/// volumes provisioned, namespaces deleted), so more than the cores.
const PROCS: usize = 4;

/// Inside the node: the driver, the suite without volguard, volguard from its chart, the
/// suite again with the observer, and the comparison.
pub fn run(node: &mut Node, logs: &Path, set: SuiteSet, trace_backend: Option<&str>) -> anyhow::Result<()> {
    let admin = node.admin();
    hostpath_driver::install(&admin, hostpath_driver::Deployment::Central, &[NODE_NAME], Duration::from_secs(90))?;
    let work = logs.join("storage-suite");
    fs::create_dir_all(&work)?;
    let driver_file = work.join("test-driver.json");
    fs::write(&driver_file, serde_json::to_string_pretty(&test_driver()?)?)?;
    check_images()?;
    pod_network()?;
    println!("e2e: storage suite ({}): testsuites {}", set.name(), set.testsuites().join(", "));
    println!("e2e: focus {}\ne2e: skip {}", focus(set), skip(set));
    for (regex, why) in skipped(set) {
        println!("e2e:   skipped {regex}: {why}");
    }

    println!("\n=== storage suite without volguard");
    let without = suite(&admin, &work, "without-volguard", set, &driver_file)?;
    println!("=== without volguard: {}", without.summary());

    // Plain HTTP: the observer reads the agent's metrics with curl on the node.
    install_volguard(&admin, &Chart { trace_backend, secure_metrics: false }, Duration::from_secs(90))?;
    let mode = agent_mode()?;
    println!("\n=== storage suite with volguard ({mode} mode, installed from its chart)");
    let before = metrics()?;
    let observer = Observer::start(admin.kubeconfig.clone());
    let with = suite(&admin, &work, "with-volguard", set, &driver_file);
    let seen = observer.stop();
    let with = with?;
    let after = metrics()?;
    println!("=== with volguard: {}", with.summary());
    fs::write(work.join("volguard-observed.json"), serde_json::to_string_pretty(&seen.to_json())?)?;

    let verdict = compare(&without, &with, &seen, &before, &after, &mode);
    println!("\n=== storage suite verdict");
    for line in &verdict.lines {
        println!("{line}");
    }
    if !verdict.problems.is_empty() {
        for problem in &verdict.problems {
            println!("FAILED: {problem}");
        }
        bail!(
            "the storage suite with volguard differs from the suite without it ({} problems)",
            verdict.problems.len()
        );
    }
    println!("e2e: storage suite ({}): the same {} specs pass with volguard as without", set.name(), with.passed.len());
    Ok(())
}

/// The suite's pods, unlike the scenarios', do not use the host's network, and containerd
/// gives a pod a sandbox only once CNI gave it an address: a bridge in the node's own
/// network namespace, addresses from host-local. containerd reads the first
/// configuration of its directory (this one sorts before the loopback placeholder,
/// node.rs) and reloads it when it changes; its CNI bin_dirs list this build's folder.
fn pod_network() -> anyhow::Result<()> {
    let dir = Path::new(super::node::STATE).join("cni");
    fs::write(
        dir.join("05-pods.conflist"),
        serde_json::to_string_pretty(&json!({
            "cniVersion": "1.0.0",
            "name": "storage-suite",
            "plugins": [{
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": true,
                "ipMasq": false,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]], "dataDir": dir.join("ipam")},
            }],
        }))?,
    )?;
    Ok(())
}

/// The pods' addresses: apart from the node's and the Services' (mod.rs).
const POD_SUBNET: &str = "10.244.0.0/24";

/// Fails unless every image the chosen specs name is one built here.
fn check_images() -> anyhow::Result<()> {
    let listed = output(Command::new(bin("e2e.test")).arg("--list-images"))?;
    for (name, _) in TEST_IMAGES {
        ensure!(listed.lines().any(|l| l.trim() == *name), "e2e.test --list-images no longer names {name}: {listed}");
    }
    Ok(())
}

/// One run of the chosen specs with ginkgo's CLI, its JSON report read back.
fn suite(admin: &Kube, work: &Path, name: &str, set: SuiteSet, driver_file: &Path) -> anyhow::Result<Outcome> {
    let dir = work.join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)?;
    let report = dir.join("report.json");
    let log = fs::File::create(dir.join("ginkgo.log"))?;
    println!("e2e: running; its output in {}", dir.join("ginkgo.log").display());
    let started = Instant::now();
    let status = Command::new(bin("ginkgo"))
        .env("KUBECONFIG", &admin.kubeconfig)
        .arg(format!("--procs={PROCS}"))
        .args(["--timeout=3h", "--no-color", "--poll-progress-after=300s"])
        .arg(format!("--focus={}", focus(set)))
        .arg(format!("--skip={}", skip(set)))
        .arg(format!("--json-report={}", report.display()))
        .arg(bin("e2e.test"))
        .arg("--")
        .arg(format!("--kubeconfig={}", admin.kubeconfig.display()))
        .arg(format!("--storage.testdriver={}", driver_file.display()))
        .arg(format!("--report-dir={}", dir.display()))
        .args(["--provider=skeleton", "--allowed-not-ready-nodes=0"])
        .stdout(log.try_clone()?)
        .stderr(log)
        .status()
        .context("running ginkgo")?;
    let seconds = started.elapsed().as_secs_f64();
    let mut outcome =
        read_report(&report).with_context(|| format!("reading {} (ginkgo {status})", report.display()))?;
    outcome.seconds = seconds;
    ensure!(
        status.success() || !outcome.failed.is_empty(),
        "ginkgo failed ({status}) without a failed spec: see {}",
        dir.join("ginkgo.log").display()
    );
    for (spec, why) in &outcome.failed {
        println!("  failed: {spec}\n          {}", why.lines().next().unwrap_or_default());
    }
    Ok(outcome)
}

/// ginkgo's JSON report: suites, each with its specs' reports.
fn read_report(file: &Path) -> anyhow::Result<Outcome> {
    let suites: Value = serde_json::from_str(&fs::read_to_string(file)?)?;
    let mut outcome = Outcome::default();
    for spec in suites.as_array().into_iter().flatten().flat_map(|s| s["SpecReports"].as_array().into_iter().flatten())
    {
        if spec["LeafNodeType"] != "It" {
            continue;
        }
        let mut text: Vec<&str> =
            spec["ContainerHierarchyTexts"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        text.extend(spec["LeafNodeText"].as_str());
        let text = text.join(" ");
        match spec["State"].as_str().unwrap_or_default() {
            "passed" => {
                outcome.passed.insert(text);
            }
            // Skipped by the spec itself (e2eskipper: the driver lacks what it tests), with why.
            "skipped" if spec["Failure"]["Message"].as_str().is_some_and(|m| !m.is_empty()) => {
                outcome.skipped.insert(text);
            }
            // Filtered out by focus and skip: not part of the run.
            "skipped" | "pending" => {}
            state => {
                let why = spec["Failure"]["Message"].as_str().unwrap_or(state).to_owned();
                outcome.failed.insert(text, why);
            }
        }
    }
    Ok(outcome)
}

/// The agent's mode (`volguard_enforcement_mode`), from its own metrics endpoint.
fn agent_mode() -> anyhow::Result<String> {
    let text = metrics_text()?;
    text.lines()
        .filter(|l| l.starts_with("volguard_enforcement_mode{") && l.ends_with(" 1"))
        .find_map(|l| l.split("mode=\"").nth(1).and_then(|r| r.split('"').next()).map(str::to_owned))
        .context("the agent's metrics have no volguard_enforcement_mode 1")
}

/// The agent's metrics endpoint on the node (the chart's metricsPort).
fn metrics_text() -> anyhow::Result<String> {
    output(Command::new("curl").args(["-sf", "http://127.0.0.1:9728/metrics"]))
}

/// The agent's own count of what volguard did: conflicts by action, and masks removed.
fn metrics() -> anyhow::Result<BTreeMap<String, f64>> {
    let mut sums = BTreeMap::new();
    for line in metrics_text()?.lines() {
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
struct Seen {
    conflicts: BTreeSet<String>,
    masks: BTreeSet<String>,
    events: BTreeSet<String>,
    /// By single-pod volume: its claim, and each distinct view of it in order.
    single_pod: BTreeMap<String, (String, Vec<String>)>,
    polls: usize,
    errors: BTreeSet<String>,
}

impl Seen {
    fn to_json(&self) -> Value {
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

struct Observer {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Seen>,
}

impl Observer {
    fn start(kubeconfig: PathBuf) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let admin = Kube { kubeconfig };
            let seen = Mutex::new(Seen::default());
            while !stopped.load(Ordering::Relaxed) {
                let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                if let Err(e) = poll(&admin, &mut s) {
                    s.errors.insert(format!("{e:#}"));
                }
                s.polls += 1;
                drop(s);
                std::thread::sleep(Duration::from_secs(2));
            }
            // A last look after the suite ended.
            let mut s = seen.into_inner().unwrap_or_else(|e| e.into_inner());
            if let Err(e) = poll(&admin, &mut s) {
                s.errors.insert(format!("{e:#}"));
            }
            s
        });
        Self { stop, thread }
    }

    fn stop(self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

fn debug_api(path: &str) -> anyhow::Result<Value> {
    Ok(serde_json::from_str(&output(Command::new("curl").args(["-sf", &format!("http://127.0.0.1:9729{path}")]))?)?)
}

fn poll(admin: &Kube, seen: &mut Seen) -> anyhow::Result<()> {
    for conflict in debug_api("/debug/conflicts?limit=256")?["conflicts"].as_array().into_iter().flatten() {
        seen.conflicts.insert(conflict.to_string());
    }
    for volume in debug_api("/debug/volumes")?["volumes"].as_array().into_iter().flatten() {
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
    seen.masks.extend(masks()?);
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

struct Verdict {
    lines: Vec<String>,
    problems: Vec<String>,
}

/// The namespaces of the ReadWriteOncePod testsuite's specs (the framework's base name).
const RWOP_NAMESPACE: &str = "read-write-once-pod-";

fn compare(
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
        let driver = test_driver().unwrap();
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
    }
}

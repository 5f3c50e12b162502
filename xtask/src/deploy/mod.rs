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
//! helm is built from its Go module (`xtask/tools/helm`, [`helm_build`]) into
//! `CHECK_DIR/helm`; kubernetes-validate and yamllint come from PyPI, pinned, in a venv
//! under [`CHECK_DIR`]; the npm packages in `CHECK_DIR/npm`.
//! Installed by `cargo xtask setup`, or here on first use.
//!
//! This module runs the checks in order and prints their outcomes; each check is a
//! module of its own: [`helm`] (1, and the rendering of 2), [`schemas`] (the validation
//! of 2), [`yamllint`](mod@yamllint) (3), [`manifests`] (4), [`rbac`](mod@rbac) (5), [`dashboard_copies`] (6) and
//! [`values_docs`] (7). [`tools`](mod@tools) installs what they run.
//!
//! [`KUBERNETES_VERSION`]: schemas::KUBERNETES_VERSION
//! [`PROMETHEUS_OPERATOR_MODELS`]: tools::PROMETHEUS_OPERATOR_MODELS
//! [`RBAC`]: rbac::RBAC
//! [`CHECK_DIR`]: tools::CHECK_DIR

mod dashboard_copies;
mod helm;
mod helm_build;
mod manifests;
mod pod_security;
mod rbac;
mod schemas;
mod tools;
mod values_docs;
mod yamllint;

use std::{fs, path::Path, process::Command, time::Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::proc::{output, workspace_root};

pub use tools::{helm_binary, install_tools};

use dashboard_copies::dashboards_copied;
use helm::{count_objects, helm_lint, helm_template, helm_template_refuses};
use manifests::manifests_in_sync;
use rbac::rbac;
use schemas::{KUBERNETES_VERSION, validate, validate_crds};
use tools::{CHECK_DIR, Tools, tools};
use values_docs::values_documented;
use yamllint::yamllint;

const MANIFESTS: &str = "deploy/manifests/volguard.yaml";
const CHART: &str = "deploy/helm/volguard";
const NONDEFAULT_VALUES: &str = "deploy/helm/volguard/ci/values-nondefault.yaml";

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
    results.push((
        "helm template refuses an update strategy DaemonSets do not have".into(),
        helm_template_refuses(&t, &root, "updateStrategy=Recreate", "is neither RollingUpdate nor OnDelete"),
    ));
    results.push((format!("{MANIFESTS} in sync with the chart"), manifests_in_sync(&t, &root, &work)));
    results.push((
        "RBAC: ClusterRole = the list in xtask/src/deploy/rbac.rs = the agent's API calls".into(),
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

/// `--write`: regenerates the manifests (4) and the chart's dashboard copies (6).
fn write_generated(t: &Tools, root: &Path) -> anyhow::Result<()> {
    manifests::write(t, root)?;
    dashboard_copies::write(root)
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

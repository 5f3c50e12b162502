//! Check 2's validation of the rendered objects: kubernetes-validate against the
//! Kubernetes OpenAPI schemas of [`KUBERNETES_VERSION`], and the prometheus-operator CRDs
//! (which it has no schema for) against [`PROMETHEUS_OPERATOR_MODELS`]' JSON schemas and
//! TypeScript types.

use std::{fs, path::Path, process::Command};

use serde_json::Value;

use super::{
    Outcome, Tools, capture,
    tools::{PROMETHEUS_OPERATOR_MODELS, PROMETHEUS_OPERATOR_MODELS_VERSION, npm_dir},
    yaml_documents,
};

/// The Kubernetes version whose schemas the rendered objects must satisfy (the oldest
/// still commonly run; the chart's kubeVersion allows >= 1.25).
pub const KUBERNETES_VERSION: &str = "1.30";
/// The CRD kinds the chart renders, each checked by [`PROMETHEUS_OPERATOR_MODELS`].
const CRD_KINDS: &[&str] = &["ServiceMonitor", "PodMonitor"];

/// kubernetes-validate, per object: every object with a schema must pass; objects of
/// kinds it has no schema for (CRDs) are named as not validated, not passed.
pub(super) fn validate(t: &Tools, file: &Path) -> Outcome {
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

/// The rendered prometheus-operator objects, against the CRD models' JSON schemas
/// (`validate()`) and their TypeScript types (`tsc --strict`, `satisfies`: unknown fields).
pub(super) fn validate_crds(t: &Tools, rendered: &Path, label: &str) -> Outcome {
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

//! Checks 1 and 2's rendering: `helm lint --strict` and `helm template` of the chart, with
//! the default or the given values file.

use std::{path::Path, process::Command};

use super::{CHART, Outcome, Tools, capture, yaml_documents};

const RELEASE: &str = "volguard";
const NAMESPACE: &str = "kube-system";

pub(super) fn helm_lint(t: &Tools, root: &Path, values: Option<&str>) -> Outcome {
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

pub(super) fn helm_template(t: &Tools, root: &Path, values: Option<&str>) -> Result<String, String> {
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

/// `helm template` with `--set {set}` fails, saying `says`: a value the chart refuses.
pub(super) fn helm_template_refuses(t: &Tools, root: &Path, set: &str, says: &str) -> Outcome {
    let mut cmd = Command::new(&t.helm);
    cmd.current_dir(root).args(["template", RELEASE, CHART, "--namespace", NAMESPACE, "--set", set]);
    match capture(&mut cmd)? {
        (true, _) => Err(format!("rendered with --set {set}")),
        (false, text) if text.contains(says) => Ok(format!("--set {set}: {says}")),
        (false, text) => Err(format!("--set {set} failed without saying {says:?}: {text}")),
    }
}

pub(super) fn count_objects(t: &Tools, file: &Path) -> anyhow::Result<usize> {
    Ok(yaml_documents(t, file)?.len())
}

//! Check 4: deploy/manifests/volguard.yaml is exactly the chart's default rendering
//! (`--write` rewrites it).

use std::{fs, path::Path, process::Command};

use super::{MANIFESTS, Outcome, Tools, capture, helm::helm_template};

const MANIFESTS_HEADER: &str = "# Generated from deploy/helm/volguard with its default values: \
`helm template volguard deploy/helm/volguard --namespace kube-system`.\n# Do not edit: \
`cargo xtask check-deploy --write` rewrites it, and the check fails when it is out of date.\n";

fn expected_manifests(t: &Tools, root: &Path) -> Result<String, String> {
    Ok(format!("{MANIFESTS_HEADER}{}", helm_template(t, root, None)?))
}

pub(super) fn manifests_in_sync(t: &Tools, root: &Path, work: &Path) -> Outcome {
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

/// `--write`: rewrites deploy/manifests/volguard.yaml with the default rendering.
pub(super) fn write(t: &Tools, root: &Path) -> anyhow::Result<()> {
    let expected = expected_manifests(t, root).map_err(|e| anyhow::anyhow!("helm template: {e}"))?;
    fs::write(root.join(MANIFESTS), expected)?;
    println!("deploy: wrote {MANIFESTS}");
    Ok(())
}

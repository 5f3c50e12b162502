//! The pinned tools the checks run, and their installation into [`CHECK_DIR`]: helm built
//! from its Go module ([`helm_build`](super::helm_build)), kubernetes-validate and
//! yamllint in a venv, the prometheus-operator models and tsc from npm.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context;

use crate::{
    nodejs::{TYPESCRIPT_VERSION, check_node},
    proc::{run_cmd, run_logged},
};

pub const CHECK_DIR: &str = "/var/cache/volguard-dev/deploy-check";
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
        helm: super::helm_build::helm_path(dir),
        python: dir.join("venv/bin/python"),
        kubernetes_validate: dir.join("venv/bin/kubernetes-validate"),
        yamllint: dir.join("venv/bin/yamllint"),
    }
}

fn stamp() -> String {
    format!(
        "kubernetes-validate=={KUBERNETES_VALIDATE_VERSION} yamllint=={YAMLLINT_VERSION} {PROMETHEUS_OPERATOR_MODELS}@{PROMETHEUS_OPERATOR_MODELS_VERSION} \
         typescript@{TYPESCRIPT_VERSION}\n"
    )
}

/// The helm that [`install_tools`] builds (the e2e installs the chart with it).
pub fn helm_binary() -> PathBuf {
    tools().helm
}

pub(super) fn npm_dir() -> PathBuf {
    Path::new(CHECK_DIR).join("npm")
}

/// Installs the pinned tools into [`CHECK_DIR`] unless they are there already.
pub fn install_tools() -> anyhow::Result<()> {
    let dir = Path::new(CHECK_DIR);
    // Not tools.stamp: that one also promised the helm of a PyPI package, which older
    // checkouts sharing this cache still unpack.
    let stamp_file = dir.join("check-tools.stamp");
    let t = tools();
    check_node()?;
    fs::create_dir_all(dir).with_context(|| format!("creating {CHECK_DIR} (run `cargo xtask setup` as root)"))?;
    super::helm_build::ensure(dir)?;
    if fs::read_to_string(&stamp_file).is_ok_and(|s| s == stamp())
        && [&t.helm, &t.python, &t.kubernetes_validate, &t.yamllint, &t.tsc].iter().all(|p| p.is_file())
    {
        println!("deploy: {} present in {CHECK_DIR}", stamp().trim());
        return Ok(());
    }
    let _ = fs::remove_file(&stamp_file);
    let venv = dir.join("venv");
    let _ = fs::remove_dir_all(&venv);
    run_cmd(Command::new(SYSTEM_PYTHON).args(["-m", "venv"]).arg(&venv))
        .context("creating the venv (Debian package python3-venv: run `cargo xtask setup`)")?;
    let pip = venv.join("bin/pip");
    run_logged(
        Command::new(&pip).args(["install", "-q", "--disable-pip-version-check"]).args([
            format!("kubernetes-validate=={KUBERNETES_VALIDATE_VERSION}"),
            format!("yamllint=={YAMLLINT_VERSION}"),
        ]),
        "deploy: pip install",
        "setup/pip",
    )?;
    let npm = npm_dir();
    fs::create_dir_all(&npm)?;
    let manifest = serde_json::json!({
        "name": "volguard-deploy-check",
        "private": true,
        "description": "written by `cargo xtask`: prometheus-operator's CRD schemas and types, and tsc",
        "dependencies": {
            PROMETHEUS_OPERATOR_MODELS: PROMETHEUS_OPERATOR_MODELS_VERSION,
            "typescript": TYPESCRIPT_VERSION,
        },
    });
    fs::write(npm.join("package.json"), serde_json::to_string_pretty(&manifest)? + "\n")?;
    run_logged(
        Command::new("npm").current_dir(&npm).args(["install", "--no-audit", "--no-fund", "--loglevel=error"]),
        "deploy: npm install",
        "setup/npm-deploy",
    )
    .context("installing the deploy check's npm packages")?;
    fs::write(&stamp_file, stamp())?;
    Ok(())
}

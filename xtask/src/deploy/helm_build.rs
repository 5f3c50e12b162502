//! helm, built from its Go module: `xtask/tools/helm/go.mod` pins `helm.sh/helm/v4`
//! (checksums in its go.sum), as e2e/components pins the node's tools. Cached in the
//! deploy check's folder, under `helm/`; rebuilt only when go.mod, go.sum or Go changed.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use crate::{
    go::{self, Stamp},
    proc::{output, run_logged, workspace_root},
};

/// The module that pins helm, relative to the workspace.
const MODULE_DIR: &str = "xtask/tools/helm";
const HELM_MODULE: &str = "helm.sh/helm/v4";

pub(super) fn helm_path(check_dir: &Path) -> PathBuf {
    check_dir.join("helm/helm")
}

/// Builds helm into `check_dir` unless a build of the same go.mod, go.sum and Go is there.
pub(super) fn ensure(check_dir: &Path) -> anyhow::Result<()> {
    let module = workspace_root().join(MODULE_DIR);
    let version = go::required_version(&module, HELM_MODULE)?;
    // helm's Makefile for a release tag; the module proxy's source carries no git commit,
    // so gitCommit stays empty.
    let ldflags = format!(
        "-w -s -X helm.sh/helm/v4/internal/version.version={version} -X helm.sh/helm/v4/internal/version.metadata= \
         -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
    );
    let helm = helm_path(check_dir);
    let dir = helm.parent().expect("a folder");
    let stamp = Stamp {
        file: dir.join("helm.stamp"),
        inputs: format!(
            "{}{}ldflags: {ldflags}\n{}",
            go::sha256(&module.join("go.mod"))? + "  go.mod\n",
            go::sha256(&module.join("go.sum"))? + "  go.sum\n",
            go::version()?
        ),
    };
    if stamp.is_current(std::slice::from_ref(&helm)) {
        return Ok(());
    }
    stamp.clear();
    std::fs::create_dir_all(dir)?;
    println!("deploy: building helm {version} from its Go module ({MODULE_DIR})");
    let started = std::time::Instant::now();
    run_logged(
        go::go(&module)?
            .env("GOFLAGS", "-mod=mod")
            .args(["build", "-trimpath", "-ldflags", &ldflags, "-o"])
            .arg(&helm)
            .arg("tool"),
        "deploy: building helm",
        "setup/helm",
    )?;
    let said = output(Command::new(&helm).args(["version", "--short"]))?;
    anyhow::ensure!(said.starts_with(&version), "the built helm says {said:?}, not {version}");
    println!("deploy: helm {} built in {:.0} s", said.trim(), started.elapsed().as_secs_f64());
    stamp.write()
}

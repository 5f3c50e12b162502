//! `cargo xtask bench --base REV`: the agent of an older commit, built in release beside
//! this one, so that the mount cycles (1r) and the tax on unrelated syscalls (8r) can be
//! measured in pairs against it in the same run: did a change make the agent dearer?

use std::{fs, path::PathBuf, process::Command};

use anyhow::{Context, bail};

use crate::proc::{cargo, output, run_cmd, target_dir, workspace_root};

/// Another build of the agent.
pub struct BaseAgent {
    /// The commit, abbreviated, as the rows name it.
    pub commit: String,
    pub binary: PathBuf,
}

/// Exports `rev`'s tree (`git archive`, no worktree to clean up) under
/// `target/bench-base/<commit>/src` and builds its agent in release there, with a target
/// directory of its own; both are kept, so a second run with the same base builds nothing.
pub fn build(rev: &str) -> anyhow::Result<BaseAgent> {
    let root = workspace_root();
    let commit =
        output(Command::new("git").current_dir(&root).args(["rev-parse", "--verify"]).arg(format!("{rev}^{{commit}}")))
            .with_context(|| format!("--base {rev}: not a commit of this repository"))?
            .trim()
            .to_owned();
    let short = commit[..12.min(commit.len())].to_owned();
    let dir = target_dir().join("bench-base").join(&commit);
    let src = dir.join("src");
    if !src.join("Cargo.toml").exists() {
        fs::create_dir_all(&src)?;
        let archive = dir.join("tree.tar");
        run_cmd(Command::new("git").current_dir(&root).args(["archive", "--output"]).arg(&archive).arg(&commit))?;
        run_cmd(Command::new("tar").arg("-xf").arg(&archive).arg("-C").arg(&src))?;
        fs::remove_file(&archive)?;
    }
    println!("== build the base agent {short} (release)");
    let targets = dir.join("target");
    run_cmd(cargo().current_dir(&src).env("CARGO_TARGET_DIR", &targets).args([
        "build",
        "--locked",
        "--release",
        "-p",
        "volguard",
    ]))?;
    let binary = targets.join("release/volguard");
    if !binary.exists() {
        bail!("{short}'s build left no agent at {}", binary.display());
    }
    Ok(BaseAgent { commit: short, binary })
}

//! The Go toolchain the machines provide (Go 1.26 at [`GO`]), and the stamp a Go build
//! leaves so that a re-run with the same inputs skips it.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, bail};

use crate::proc::output;

/// The Go toolchain of the polyglot machines.
pub const GO: &str = "/usr/local/go/bin/go";

/// `go` with cgo off (static binaries, as upstream releases them).
pub fn go(dir: &Path) -> anyhow::Result<Command> {
    if !Path::new(GO).is_file() {
        bail!("{GO} is missing: the build needs Go (the polyglot machine kind has Go 1.26 there)");
    }
    let mut cmd = Command::new(GO);
    cmd.current_dir(dir).env("CGO_ENABLED", "0");
    Ok(cmd)
}

/// The version the go.mod in `module_dir` requires of `module` (e.g. `k8s.io/kubernetes`
/// → `v1.34.4`).
pub fn required_version(module_dir: &Path, module: &str) -> anyhow::Result<String> {
    let go_mod = fs::read_to_string(module_dir.join("go.mod"))?;
    go_mod
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let first = words.next()?;
            let (name, version) =
                if first == "require" { (words.next()?, words.next()?) } else { (first, words.next()?) };
            (name == module && version.starts_with('v')).then(|| version.to_owned())
        })
        .next()
        .with_context(|| format!("{}/go.mod requires no {module}", module_dir.display()))
}

/// `go version`, part of every build's inputs.
pub fn version() -> anyhow::Result<String> {
    output(Command::new(GO).arg("version"))
}

/// The SHA-256 of `file`, as `sha256sum` prints it (hex only).
pub fn sha256(file: &Path) -> anyhow::Result<String> {
    let line = output(Command::new("sha256sum").arg(file))?;
    Ok(line.split_whitespace().next().unwrap_or_default().to_owned())
}

/// A build's stamp: the description of its inputs, written once its outputs exist.
pub struct Stamp {
    pub file: PathBuf,
    pub inputs: String,
}

impl Stamp {
    /// True when the last build had these inputs and left every output.
    pub fn is_current(&self, outputs: &[PathBuf]) -> bool {
        fs::read_to_string(&self.file).is_ok_and(|s| s == self.inputs) && outputs.iter().all(|o| o.is_file())
    }

    /// Forgets the last build (before a new one starts, so that a failed one is not taken for it).
    pub fn clear(&self) {
        let _ = fs::remove_file(&self.file);
    }

    pub fn write(&self) -> anyhow::Result<()> {
        Ok(fs::write(&self.file, &self.inputs)?)
    }
}

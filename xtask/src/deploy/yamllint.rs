//! Check 3: `yamllint --strict` on deploy/ and on the renderings.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use super::{Outcome, Tools, capture};

pub(super) fn yamllint(t: &Tools, root: &Path, rendered: &[PathBuf]) -> Outcome {
    let mut cmd = Command::new(&t.yamllint);
    cmd.current_dir(root).args(["--strict", "-f", "parsable", "-c", "deploy/.yamllint", "deploy"]).args(rendered);
    match capture(&mut cmd)? {
        (true, _) => Ok(format!("deploy/ and {} renderings clean", rendered.len())),
        (false, text) => Err(text),
    }
}

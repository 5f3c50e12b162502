//! The Node.js side of the dashboards' and the deploy checks: the typescript both install
//! from npm, and the node it needs.

use std::process::Command;

use anyhow::{Context, bail};

use crate::proc::output;

/// The typescript (tsc) pinned in the dashboards' and the deploy checks' npm packages.
pub const TYPESCRIPT_VERSION: &str = "5.9.3";
/// typescript 5.9's `engines.node`.
const MIN_NODE: (u32, u32) = (14, 17);

/// Fails unless `node` is on PATH and new enough for typescript [`TYPESCRIPT_VERSION`].
pub fn check_node() -> anyhow::Result<()> {
    let version = output(Command::new("node").arg("--version")).context("node is missing: run `cargo xtask setup`")?;
    let mut parts = version.trim().trim_start_matches('v').split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if found < MIN_NODE {
        bail!(
            "node {} is too old for typescript {TYPESCRIPT_VERSION} (needs >= {}.{})",
            version.trim(),
            MIN_NODE.0,
            MIN_NODE.1
        );
    }
    Ok(())
}

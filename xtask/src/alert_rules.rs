//! The example alerting rules in dashboards/ (`volguard-alerts.yaml`): `promtool check
//! rules` accepts them, `promtool test rules` passes their cases
//! (`volguard-alerts.test.yaml`), and every metric they name is one the agent exports.
//! Part of `cargo xtask check-dashboards`.

use std::{path::Path, process::Command};

use anyhow::{Context, bail};

use crate::promql::{Exported, metric_names};

const RULES: &str = "volguard-alerts.yaml";
const CASES: &str = "volguard-alerts.test.yaml";

pub fn check(dir: &Path, promtool: &Path, exported: &Exported) -> anyhow::Result<()> {
    println!("\n--- dashboards/{RULES}");
    let mut failed = false;
    for (what, args) in [("check rules", [RULES]), ("test rules", [CASES])] {
        let mut command = Command::new(promtool);
        command.current_dir(dir).args(what.split(' ')).args(args);
        let out = command.output().with_context(|| format!("running promtool {what}"))?;
        if out.status.success() {
            println!("ok     promtool {what} {}", args.join(" "));
        } else {
            failed = true;
            let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
            println!("FAILED promtool {what} {}:\n{}", args.join(" "), text.trim_end());
        }
    }
    let text = std::fs::read_to_string(dir.join(RULES)).with_context(|| format!("reading {RULES}"))?;
    let exprs: Vec<&str> = text.lines().filter_map(|l| l.trim_start().strip_prefix("expr:")).collect();
    let unknown: Vec<String> = exprs.iter().flat_map(|e| metric_names(e)).filter(|m| !exported.knows(m)).collect();
    if exprs.is_empty() || !unknown.is_empty() {
        failed = true;
        println!("FAILED metrics: {} expressions; not exported by the agent: {unknown:?}", exprs.len());
    } else {
        println!("ok     metrics: the {} expressions name only metrics the agent exports", exprs.len());
    }
    if failed {
        bail!("alerting rule checks failed");
    }
    Ok(())
}

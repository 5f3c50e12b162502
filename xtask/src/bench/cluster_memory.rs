//! Benchmark 3c: the agent's memory when the cluster holds 100,000 PVs and PVCs of which
//! 200 are used on its node. The measure is an ignored integration test
//! (`agent/tests/integration/k8s_scale_bench.rs`: the release agent against a fake API
//! server, empty then loaded); this module runs it and turns its `SCALE_RSS` line into a row.

use std::{collections::HashMap, fmt::Write as _, process::Stdio};

use anyhow::{Context, bail};

use super::{Bench, Row, agent::Loaded};
use crate::proc::cargo;

const TEST: &str = "k8s_scale_bench::agent_rss_with_100000_pvs_and_pvcs_in_the_cluster_and_200_used_on_the_node";
const BUDGET_MIB: f64 = 5.0;

impl Bench {
    pub(super) fn cluster_memory(&mut self) -> anyhow::Result<Option<Loaded>> {
        let args = [
            "test",
            "--locked",
            "-p",
            "volguard",
            "--release",
            "--test",
            "integration",
            TEST,
            "--",
            "--ignored",
            "--exact",
        ];
        let out = cargo()
            .args(args)
            .arg("--nocapture")
            .env("VOLGUARD_AGENT_BIN", &self.agent)
            .stdin(Stdio::null())
            .output()
            .context("running the scale test")?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let Some(line) = stdout.lines().find(|l| l.starts_with("SCALE_RSS ")) else {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(12).collect();
            bail!(
                "the scale test printed no SCALE_RSS line ({}):\n{}",
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        };
        self.report.commands.push(format!("cargo {} --nocapture  # 3c", args.join(" ")));
        let fields: HashMap<&str, &str> = line.split_whitespace().skip(1).filter_map(|f| f.split_once('=')).collect();
        let number = |key: &str| -> anyhow::Result<f64> {
            fields.get(key).and_then(|v| v.parse().ok()).with_context(|| format!("no {key}= in {line:?}"))
        };
        let (idle, loaded) = (number("idle_kib")? / 1024.0, number("loaded_kib")? / 1024.0);
        let (used, claim_watches, volume_watches, connections) =
            (number("used")?, number("claim_watches")?, number("volume_watches")?, number("connections")?);
        let delta = loaded - idle;
        println!("  {line}");
        self.report.rows.push(Row::new(
            "3c. agent RSS, 100,000 PVs and PVCs in the cluster, 200 used on the node (fake API server, TLS + HTTP/2)",
            format!("{idle:.1} MiB (idle)"),
            format!("{loaded:.1} MiB"),
            format!("+{delta:.1} MiB"),
            "≤ idle + 5 MiB",
            Some(delta <= BUDGET_MIB),
        ));
        let _ = writeln!(
            self.report.details,
            "### 3c. Agent memory with a large cluster\n\n`agent/tests/integration/k8s_scale_bench.rs`: the release \
             agent (`--kubernetes`, quarantine mode) against a fake API server on 127.0.0.1 serving TLS with ALPN h2 as a \
             real one does, once empty (idle) and \
             once holding {} ReadWriteOncePod PVs and {} PVCs, {used} of them used by 20 pods on this node (and 500 \
             pods on other nodes, which its field selector hides). VmRSS from /proc/<pid>/status, the larger of two \
             samples 1 s apart once the agent's facts hold the {used} single-pod volumes. The agent follows only the \
             claims its pods use: {claim_watches} claim and {volume_watches} volume watches, each narrowed to one \
             name, all on {connections} HTTP/2 connection(s); no request for PVs or PVCs without a name. Creating \
             200,000 objects in the real API server of `cargo xtask e2e` does not fit the benchmark's time, hence \
             the fake. One run. Line: `{line}`.\n",
            fields.get("pvs").copied().unwrap_or("?"),
            fields.get("pvcs").copied().unwrap_or("?"),
        );
        Ok(None)
    }
}

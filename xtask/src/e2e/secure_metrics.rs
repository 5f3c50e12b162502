//! Scenario 8: the chart's `metrics.secure` on the real node. The agent serves /metrics
//! over HTTPS (its self-signed certificate) and asks the real API server about each
//! caller's token: Prometheus scrapes with its ServiceAccount token, bound to the chart's
//! metrics-reader ClusterRole (prometheus.rs), and its series arrive; a request without a
//! token is 401, one with an unbound ServiceAccount's token 403, and the agent counts
//! each decision (read back through Prometheus).

use std::time::Duration;

use anyhow::ensure;

use super::{
    METRICS_PORT, NODE_IP,
    kube::{Kube, wait_for},
    prometheus,
};
use volguard_client::{Client, Trust};

const UNBOUND: &str = "e2e-unbound";

pub(super) fn only_bound_callers(admin: &Kube) -> anyhow::Result<String> {
    let target = prometheus::query("up{job=\"volguard\"}")?;
    let scheme = target.first().and_then(|t| t["metric"]["instance"].as_str()).map(str::to_owned);
    ensure!(target.iter().any(|t| t["value"][1] == "1"), "Prometheus's volguard target is not up: {target:?}");
    let series = prometheus::value("count({job=\"volguard\",__name__=~\"volguard_.+\"})")?;
    ensure!(series >= 10.0, "only {series} volguard series arrived through the HTTPS scrape");

    admin.apply(&format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {UNBOUND}, namespace: kube-system}}\n"
    ))?;
    let unbound = admin.run(&["create", "token", UNBOUND, "-n", "kube-system", "--duration=1h"])?;
    let bound = admin.run(&["create", "token", "prometheus", "-n", "kube-system", "--duration=1h"])?;
    let client = Client::https(Duration::from_secs(10), Trust::Any);
    let url = |path: &str| format!("https://{NODE_IP}:{METRICS_PORT}{path}");
    let status = |path: &str, token: Option<&str>| -> anyhow::Result<(u16, String)> {
        let answer = client.get(&url(path), token)?;
        Ok((answer.status, answer.body))
    };
    let (no_token, body) = status("/metrics", None)?;
    ensure!(no_token == 401, "GET /metrics without a token: HTTP {no_token}, not 401: {body}");
    let (garbage, body) = status("/metrics", Some("not-a-token"))?;
    ensure!(garbage == 401, "GET /metrics with a bad token: HTTP {garbage}, not 401: {body}");
    let (forbidden, body) = status("/metrics", Some(unbound.trim()))?;
    ensure!(forbidden == 403, "GET /metrics as {UNBOUND}: HTTP {forbidden}, not 403: {body}");
    ensure!(body.contains(&format!("system:serviceaccount:kube-system:{UNBOUND}")), "the 403 names no caller: {body}");
    let (allowed, body) = status("/metrics", Some(bound.trim()))?;
    ensure!(allowed == 200 && body.contains("volguard_build_info"), "GET /metrics as prometheus: HTTP {allowed}");
    let (health, _) = status("/healthz", None)?;
    ensure!(health == 200, "GET /healthz without a token (kubelet's probe): HTTP {health}");
    let (plain, _) = Client::plain(Duration::from_secs(10))
        .get(&format!("http://{NODE_IP}:{METRICS_PORT}/metrics"), None)
        .map(|r| (r.status, r.body))
        .unwrap_or((0, String::new()));
    ensure!(plain != 200, "/metrics still answers 200 in plain HTTP");

    // The agent's own count of its decisions, scraped by the allowed Prometheus.
    let counted =
        |decision: &str| prometheus::value(&format!("sum(volguard_metrics_requests_total{{decision=\"{decision}\"}})"));
    wait_for("the agent's counts of 401s and 403s in Prometheus", Duration::from_secs(30), || {
        Ok(counted("no_token")? >= 1.0 && counted("invalid_token")? >= 1.0 && counted("forbidden")? >= 1.0)
    })?;
    Ok(format!(
        "target {} up over HTTPS, {series} volguard series; no token 401, bad token 401, {UNBOUND} 403, prometheus 200; \
         /healthz open; counted: allowed {}, no_token {}, invalid_token {}, forbidden {}",
        scheme.unwrap_or_default(),
        counted("allowed")?,
        counted("no_token")?,
        counted("invalid_token")?,
        counted("forbidden")?,
    ))
}

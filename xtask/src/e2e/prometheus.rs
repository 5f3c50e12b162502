//! A real Prometheus (built from its Go module: Debian's is built without Kubernetes
//! service discovery) that finds the agent's pods through Kubernetes service
//! discovery against the node's API server, with a ServiceAccount token of its own, and
//! scrapes them over HTTPS with that token (the chart's `metrics.secure`), the account
//! bound to the chart's metrics-reader ClusterRole.

use std::{fs, path::Path, process::Command, time::Duration};

use anyhow::Context;
use serde_json::Value;

use super::{
    components::bin,
    kube::{Kube, wait_for},
    node::{API_PORT, Node},
};
use crate::proc::output;

const LISTEN: &str = "127.0.0.1:9090";

/// Gives Prometheus an identity that may list and watch pods and get the agent's
/// /metrics, and starts it.
pub fn start(node: &mut Node, admin: &Kube, state: &Path) -> anyhow::Result<()> {
    admin.apply(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: prometheus, namespace: kube-system}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: e2e-prometheus}\n\
         rules: [{apiGroups: [\"\"], resources: [pods], verbs: [get, list, watch]}]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: e2e-prometheus}\n\
         roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-prometheus}\n\
         subjects: [{kind: ServiceAccount, name: prometheus, namespace: kube-system}]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: e2e-prometheus-metrics}\n\
         roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: volguard-metrics-reader}\n\
         subjects: [{kind: ServiceAccount, name: prometheus, namespace: kube-system}]\n",
    )?;
    let token = admin.run(&["create", "token", "prometheus", "-n", "kube-system", "--duration=4h"])?;
    let dir = state.join("prometheus");
    fs::create_dir_all(&dir)?;
    fs::write(dir.join("token"), token.trim())?;
    let config = format!(
        r#"global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: volguard
    kubernetes_sd_configs:
      - role: pod
        api_server: https://127.0.0.1:{API_PORT}
        namespaces: {{names: [kube-system]}}
        tls_config: {{ca_file: {ca}}}
        authorization: {{credentials_file: {token}}}
    # The agent's self-signed certificate (metrics.secure without a Secret).
    scheme: https
    tls_config: {{insecure_skip_verify: true}}
    authorization: {{credentials_file: {token}}}
    relabel_configs:
      - source_labels: [__meta_kubernetes_pod_label_app_kubernetes_io_name, __meta_kubernetes_pod_container_port_name]
        regex: volguard;metrics
        action: keep
      - source_labels: [__meta_kubernetes_pod_name]
        target_label: pod
"#,
        ca = node.pki.ca().display(),
        token = dir.join("token").display(),
    );
    fs::write(dir.join("prometheus.yml"), config)?;
    let args = vec![
        format!("--config.file={}", dir.join("prometheus.yml").display()),
        format!("--storage.tsdb.path={}", dir.join("data").display()),
        format!("--web.listen-address={LISTEN}"),
    ];
    node.spawn("prometheus", &bin("prometheus"), &args)?;
    wait_for("Prometheus to discover and scrape the agent", Duration::from_secs(60), || {
        let up = query("up{job=\"volguard\"}")?;
        Ok(up.iter().any(|s| s["value"][1] == "1"))
    })?;
    Ok(())
}

/// An instant query's result vector.
pub fn query(promql: &str) -> anyhow::Result<Vec<Value>> {
    let body = output(Command::new("curl").args([
        "-sf",
        &format!("http://{LISTEN}/api/v1/query"),
        "--data-urlencode",
        &format!("query={promql}"),
    ]))?;
    let parsed: Value = serde_json::from_str(&body).context("Prometheus answered no JSON")?;
    Ok(parsed["data"]["result"].as_array().cloned().unwrap_or_default())
}

/// The single value of a scalar-like query (sum(...)), 0 when there is no series.
pub fn value(promql: &str) -> anyhow::Result<f64> {
    let result = query(promql)?;
    let value = result.first().and_then(|s| s["value"][1].as_str()).and_then(|v| v.parse().ok());
    value.with_context(|| format!("Prometheus has no series for {promql} (a missing series is not 0)"))
}

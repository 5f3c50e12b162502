//! A real Prometheus (built from its Go module: Debian's is built without Kubernetes
//! service discovery) that finds the agent's pods through Kubernetes service
//! discovery against the node's API server, with a ServiceAccount token of its own, and
//! scrapes them over HTTPS with that token (the chart's `metrics.secure`), the account
//! bound to the chart's metrics-reader ClusterRole. Each series is labelled with its
//! agent's node (`node`, from the pod's node name, as the chart's ServiceMonitor and
//! PodMonitor relabel it and the dashboards expect).

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
/// How long the agents may take to be scraped once Prometheus starts: the emulated node's
/// agent may still be starting.
const FIRST_SCRAPES: Duration = Duration::from_secs(600);

/// Gives Prometheus an identity that may list and watch pods and get the agent's
/// /metrics, and starts it; returns once the agent of each of `nodes` is scraped.
pub fn start(node: &mut Node, admin: &Kube, state: &Path, nodes: &[&str]) -> anyhow::Result<()> {
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
    fs::write(dir.join("prometheus.yml"), config(&node.pki.ca(), &dir.join("token")))?;
    let args = vec![
        format!("--config.file={}", dir.join("prometheus.yml").display()),
        format!("--storage.tsdb.path={}", dir.join("data").display()),
        format!("--web.listen-address={LISTEN}"),
    ];
    node.spawn("prometheus", &bin("prometheus"), &args)?;
    // The emulated node's agent may still be starting its HTTPS listener.
    wait_for(&format!("Prometheus to discover and scrape the agents of {}", nodes.join(", ")), FIRST_SCRAPES, || {
        let up = query("up{job=\"volguard\"} == 1")?;
        Ok(nodes.iter().all(|n| up.iter().any(|s| s["metric"]["node"] == *n)))
    })?;
    Ok(())
}

/// Prometheus's configuration: the agent's pods found through the API server (with the
/// CA at `ca` and the token in `token`), scraped over HTTPS with the token, each series
/// labelled with its pod and its node.
fn config(ca: &Path, token: &Path) -> String {
    format!(
        r#"global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: volguard
    # The agent in the emulated VM answers slower than 1 s now and then; a failed
    # scrape would make every series of that node stale at once.
    scrape_interval: 3s
    scrape_timeout: 3s
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
      - source_labels: [__meta_kubernetes_pod_node_name]
        target_label: node
"#,
        ca = ca.display(),
        token = token.display(),
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_is_labelled_with_its_agents_node_as_the_charts_monitors_label_it() {
        let config: Value = serde_yaml_ng::from_str(&config(Path::new("/pki/ca.crt"), Path::new("/p/token"))).unwrap();
        let job = &config["scrape_configs"][0];
        assert_eq!(job["kubernetes_sd_configs"][0]["role"], "pod");
        let relabel = job["relabel_configs"].as_array().unwrap();
        assert!(
            relabel.iter().any(|r| r["source_labels"] == serde_json::json!(["__meta_kubernetes_pod_node_name"])
                && r["target_label"] == "node"),
            "{relabel:?}"
        );
        let chart =
            std::fs::read_to_string(crate::proc::workspace_root().join("deploy/helm/volguard/templates/_helpers.tpl"))
                .unwrap();
        assert!(
            chart.contains("sourceLabels: [__meta_kubernetes_pod_node_name]") && chart.contains("targetLabel: node"),
            "the chart's monitors label `node` the same way"
        );
    }
}

//! F2: Prometheus, finding the agents through Kubernetes service discovery, scrapes the
//! agent of each node, every series labelled with its node; and the dashboards' queries
//! that break their data down by node, run on that Prometheus as Grafana runs them (each
//! variable at "All"), give rows of those nodes only, one per node.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use anyhow::{Context, bail, ensure};
use serde_json::Value;

use super::{kube::wait_for, prometheus};
use crate::proc::workspace_root;

const DASHBOARDS: &[&str] = &["dashboards/volguard-fleet.json", "dashboards/volguard-mount-latency.json"];
/// Metrics every agent exports from its start, whatever happened on its node: a
/// dashboard query over these alone must give a row for every node.
const ALWAYS_EXPORTED: &[&str] = &[
    "volguard_build_info",
    "volguard_enforcement_mode",
    "volguard_inventory_info",
    "volguard_inventory_stale",
    "volguard_inventory_last_sync_timestamp_seconds",
    "volguard_single_pod_volumes",
    "volguard_events_lost_total",
];

pub(super) fn per_node(nodes: &[&str]) -> anyhow::Result<String> {
    let expected: BTreeSet<&str> = nodes.iter().copied().collect();
    // The targets of agents replaced by the last rollout leave with their pods.
    let _ = wait_for("one target per node", Duration::from_secs(120), || {
        Ok(prometheus::query("up{job=\"volguard\"}")?.len() == nodes.len())
    });
    let up = prometheus::query("up{job=\"volguard\"}")?;
    let targets: BTreeMap<&str, &str> =
        up.iter().map(|s| (s["metric"]["node"].as_str().unwrap_or(""), s["value"][1].as_str().unwrap_or(""))).collect();
    ensure!(up.len() == nodes.len(), "Prometheus scrapes {} targets, not one per node: {up:?}", up.len());
    ensure!(targets.keys().copied().collect::<BTreeSet<_>>() == expected, "targets by node: {targets:?}");
    ensure!(targets.values().all(|v| *v == "1"), "a node's agent is not up: {targets:?}");
    let unlabelled = prometheus::query("count({job=\"volguard\",node=\"\"})")?;
    ensure!(unlabelled.is_empty(), "series without their node: {unlabelled:?}");
    let mut series = BTreeMap::new();
    for row in prometheus::query("count by (node) ({job=\"volguard\",__name__=~\"volguard_.+\"})")? {
        let count: f64 = row["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap_or(0.0);
        series.insert(row["metric"]["node"].as_str().unwrap_or("").to_owned(), count);
    }
    for node in nodes {
        let count = series.get(*node).copied().unwrap_or(0.0);
        ensure!(count >= 10.0, "only {count} volguard series of {node}: {series:?}");
    }

    let mut checked = Vec::new();
    for file in DASHBOARDS {
        let text = std::fs::read_to_string(workspace_root().join(file)).with_context(|| format!("reading {file}"))?;
        let dashboard: Value = serde_json::from_str(&text).with_context(|| format!("{file} is not JSON"))?;
        for query in crate::dashboards::queries(&dashboard) {
            let Some(by) = grouping_with_node(&query.expr) else { continue };
            let rows = prometheus::query(&query.expr)?;
            let all_nodes =
                crate::promql::metric_names(&query.expr).iter().all(|m| ALWAYS_EXPORTED.contains(&m.as_str()));
            rows_per_node(&rows, &by, nodes, all_nodes)
                .with_context(|| format!("{file}, {}: {}", query.source, query.expr))?;
            checked.push(format!("{} ({} rows)", query.source, rows.len()));
        }
    }
    ensure!(!checked.is_empty(), "no dashboard query breaks its data down by node");
    Ok(format!(
        "one target per node, up: {targets:?}; volguard series per node {series:?}; {} dashboard queries by node, \
         each row of one of {nodes:?}: {}",
        checked.len(),
        checked.join(", ")
    ))
}

/// The labels of the outermost `by (...)` of an expression that groups by `node`.
fn grouping_with_node(expr: &str) -> Option<Vec<String>> {
    let mut rest = expr;
    while let Some(at) = rest.find("by (") {
        let after = &rest[at + 4..];
        let end = after.find(')')?;
        let labels: Vec<String> = after[..end].split(',').map(|l| l.trim().to_owned()).collect();
        if labels.iter().any(|l| l == "node") {
            return Some(labels);
        }
        rest = &after[end..];
    }
    None
}

/// The rows of a query grouped `by` labels that include `node`: each names one of `nodes`;
/// one row per node where `node` (and `cluster`, absent here) is all it groups by; every
/// node present when `all_nodes` (a query over metrics every agent exports).
fn rows_per_node(rows: &[Value], by: &[String], nodes: &[&str], all_nodes: bool) -> anyhow::Result<()> {
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for row in rows {
        let Some(node) = row["metric"]["node"].as_str() else { bail!("a row without its node: {row}") };
        ensure!(nodes.contains(&node), "a row of {node:?}, not one of {nodes:?}: {row}");
        *per_node.entry(node).or_insert(0) += 1;
    }
    if by.iter().all(|l| l == "node" || l == "cluster") {
        ensure!(per_node.values().all(|n| *n == 1), "more than one row for a node: {per_node:?}");
    }
    if all_nodes {
        let missing: Vec<&&str> = nodes.iter().filter(|n| !per_node.contains_key(**n)).collect();
        ensure!(missing.is_empty(), "no row for {missing:?} (rows per node {per_node:?})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn queries_grouped_by_node_are_found_with_their_labels() {
        assert_eq!(
            grouping_with_node("sum by (cluster, node) (rate(volguard_conflicts_total[5m]))"),
            Some(vec!["cluster".into(), "node".into()])
        );
        assert_eq!(
            grouping_with_node("sort_desc(sum by (namespace) (x)) or max by (cluster, node, mode, reason) (y)"),
            Some(vec!["cluster".into(), "node".into(), "mode".into(), "reason".into()])
        );
        assert_eq!(grouping_with_node("sum by (action, route) (rate(x[5m]))"), None);
        assert_eq!(grouping_with_node("count(volguard_build_info)"), None);
    }

    #[test]
    fn every_row_names_one_of_the_nodes_and_each_node_has_its_row() {
        let row = |node: Option<&str>| match node {
            Some(n) => json!({"metric": {"node": n}, "value": [0, "1"]}),
            None => json!({"metric": {}, "value": [0, "1"]}),
        };
        let nodes = ["a", "b"];
        let by: Vec<String> = vec!["cluster".into(), "node".into()];
        assert!(rows_per_node(&[row(Some("a")), row(Some("b"))], &by, &nodes, true).is_ok());
        assert!(rows_per_node(&[row(Some("a"))], &by, &nodes, true).is_err(), "b's row missing");
        assert!(rows_per_node(&[row(Some("a"))], &by, &nodes, false).is_ok(), "a conflict on one node only");
        assert!(rows_per_node(&[row(None), row(Some("a"))], &by, &nodes, false).is_err(), "a row without its node");
        assert!(rows_per_node(&[row(Some("c"))], &by, &nodes, false).is_err(), "a node not in the cluster");
        assert!(rows_per_node(&[row(Some("a")), row(Some("a"))], &by, &nodes, false).is_err(), "two rows for a");
        let by_mode: Vec<String> = vec!["cluster".into(), "node".into(), "mode".into()];
        assert!(rows_per_node(&[row(Some("a")), row(Some("a")), row(Some("b"))], &by_mode, &nodes, true).is_ok());
    }

    /// The real dashboards: their per-node queries are found, and those over metrics
    /// every agent exports are among them (else the check above would check little).
    #[test]
    fn the_fleet_dashboard_has_per_node_queries_over_metrics_every_agent_exports() {
        let text = std::fs::read_to_string(workspace_root().join(DASHBOARDS[0])).unwrap();
        let dashboard: Value = serde_json::from_str(&text).unwrap();
        let per_node: Vec<String> = crate::dashboards::queries(&dashboard)
            .into_iter()
            .filter(|q| grouping_with_node(&q.expr).is_some())
            .map(|q| q.expr)
            .collect();
        let always = per_node
            .iter()
            .filter(|e| crate::promql::metric_names(e).iter().all(|m| ALWAYS_EXPORTED.contains(&m.as_str())))
            .count();
        assert!(per_node.len() >= 8 && always >= 4, "{per_node:#?}");
    }
}

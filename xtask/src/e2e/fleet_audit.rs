//! F4: each agent follows only its own node's pods and speaks for its own node, shown by
//! the API server itself and by each agent's view.
//!
//! The API server's audit log (its policy in node.rs) records every list and watch of
//! pods the agents make, with the request's field selector, and every Event they create;
//! each record carries the node of the agent's pod-bound token
//! (`authentication.kubernetes.io/node-name` in the user's extra, which the API server
//! takes from the token kubelet asked for that pod). Each agent's `/debug/volumes`
//! (through `volguard volumes --json` in its pod: the debug API listens on the node's
//! loopback) names only pods and claims of its node.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::Path,
};

use anyhow::{Context, bail, ensure};
use serde_json::Value;

use super::{
    kube::Kube,
    node::{AGENT_USER, AUDIT_LOG},
    workload::{AGENT_NS, NS, agent_pod},
};

/// The user's extra key that names the node of a pod-bound ServiceAccount token.
const NODE_NAME_KEY: &str = "authentication.kubernetes.io/node-name";

/// One request of an agent, as the audit log recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct AgentRequest {
    verb: String,
    resource: String,
    namespace: String,
    name: String,
    /// The node of the token the request was made with.
    node: String,
    /// The request's `fieldSelector`, decoded.
    field_selector: Option<String>,
}

/// The agents' requests in an audit log (JSON, one event a line), once each (a watch is
/// recorded when its response starts and again when it ends).
fn agent_requests(log: &str) -> Vec<AgentRequest> {
    let mut seen = BTreeSet::new();
    let mut requests = Vec::new();
    for line in log.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else { continue };
        if event["user"]["username"] != AGENT_USER || !seen.insert(event["auditID"].to_string()) {
            continue;
        }
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let uri = text(&event["requestURI"]);
        requests.push(AgentRequest {
            verb: text(&event["verb"]),
            resource: text(&event["objectRef"]["resource"]),
            namespace: text(&event["objectRef"]["namespace"]),
            name: text(&event["objectRef"]["name"]),
            node: text(&event["user"]["extra"][NODE_NAME_KEY][0]),
            field_selector: query_parameter(&uri, "fieldSelector"),
        });
    }
    requests
}

/// A query parameter of a request URI, percent-decoded.
fn query_parameter(uri: &str, key: &str) -> Option<String> {
    let query = uri.split_once('?')?.1;
    let value = query.split('&').find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))?;
    let bytes = value.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes[i] == b'%').then(|| value.get(i + 1..i + 3)).flatten();
        match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
            Some(byte) => {
                decoded.push(byte);
                i += 3;
            }
            None => {
                decoded.push(bytes[i]);
                i += 1;
            }
        }
    }
    Some(String::from_utf8_lossy(&decoded).into_owned())
}

/// What the audit log shows of the agents' pod reads: every list and watch of pods is
/// narrowed to the node of the token it was made with, and each of `nodes` watched.
/// Returns the watches per node.
fn pod_reads_per_node(requests: &[AgentRequest], nodes: &[&str]) -> anyhow::Result<BTreeMap<String, usize>> {
    let reads: Vec<&AgentRequest> =
        requests.iter().filter(|r| r.resource == "pods" && (r.verb == "list" || r.verb == "watch")).collect();
    let wide: Vec<&&AgentRequest> = reads
        .iter()
        .filter(|r| r.node.is_empty() || r.field_selector.as_deref() != Some(&format!("spec.nodeName={}", r.node)))
        .collect();
    ensure!(wide.is_empty(), "agents read pods beyond their own node: {wide:?}");
    let mut watches = BTreeMap::new();
    for node in nodes {
        let count = reads.iter().filter(|r| r.verb == "watch" && r.node == *node).count();
        ensure!(count > 0, "the audit log holds no watch of pods by the agent on {node}");
        watches.insert((*node).to_owned(), count);
    }
    Ok(watches)
}

/// Each Event (`name`, `reportingInstance`) was created by the agent of the node it names,
/// as the audit log's record of its creation says; returns the Events per node.
fn events_from_their_nodes(
    requests: &[AgentRequest],
    events: &[(String, String)],
) -> anyhow::Result<BTreeMap<String, usize>> {
    let mut per_node = BTreeMap::new();
    for (name, instance) in events {
        let created = requests
            .iter()
            .find(|r| r.verb == "create" && r.resource == "events" && r.namespace == NS && r.name == *name)
            .with_context(|| format!("the audit log holds no agent's creation of Event {name}"))?;
        ensure!(
            created.node == *instance,
            "Event {name} names {instance:?} as its reporter but was created with the token of the agent on {:?}",
            created.node
        );
        *per_node.entry(instance.clone()).or_insert(0) += 1;
    }
    Ok(per_node)
}

/// The volumes in the view of the agent on `node` (its `/debug/volumes`).
pub(super) fn debug_volumes(admin: &Kube, node: &str) -> anyhow::Result<Vec<Value>> {
    let pod = agent_pod(admin, node)?;
    let text = admin.run(&["exec", "-n", AGENT_NS, &pod, "--", super::images::AGENT_IN_IMAGE, "volumes", "--json"])?;
    let body: Value = serde_json::from_str(&text).with_context(|| format!("{pod}'s volguard volumes --json"))?;
    Ok(body["volumes"].as_array().cloned().unwrap_or_default())
}

/// The view of volume `pv` of the agent on `node`, if it lists it.
pub(super) fn volume_view(admin: &Kube, node: &str, pv: &str) -> anyhow::Result<Option<Value>> {
    Ok(debug_volumes(admin, node)?.into_iter().find(|v| v["name"] == pv))
}

/// Pods (`namespace/name`) by the node they run on.
type PodNodes = BTreeMap<String, String>;
/// The claims (`namespace/name`) the pods of each node use.
type NodeClaims = BTreeMap<String, BTreeSet<String>>;

/// Where each pod of the cluster runs, and which claims the pods of each node use.
fn placement(admin: &Kube) -> anyhow::Result<(PodNodes, NodeClaims)> {
    let mut nodes = BTreeMap::new();
    let mut claims: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for pod in admin.get_json(&["pods", "--all-namespaces"])?["items"].as_array().into_iter().flatten() {
        let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
        let node = pod["spec"]["nodeName"].as_str().unwrap_or_default().to_owned();
        nodes.insert(format!("{namespace}/{}", pod["metadata"]["name"].as_str().unwrap_or_default()), node.clone());
        for volume in pod["spec"]["volumes"].as_array().into_iter().flatten() {
            if let Some(claim) = volume["persistentVolumeClaim"]["claimName"].as_str() {
                claims.entry(node.clone()).or_default().insert(format!("{namespace}/{claim}"));
            }
        }
    }
    Ok((nodes, claims))
}

/// An agent's view names no pod of another node and no claim only another node's pods
/// use, and at least one claim of its own node's pods; returns the claims it names.
fn view_is_of_its_node(
    node: &str,
    view: &[Value],
    pods: &PodNodes,
    claims: &NodeClaims,
) -> anyhow::Result<BTreeSet<String>> {
    let own = claims.get(node).cloned().unwrap_or_default();
    let mut named = BTreeSet::new();
    for volume in view {
        for pod in volume["pod_names"].as_object().into_iter().flat_map(|m| m.values()).filter_map(Value::as_str) {
            if let Some(elsewhere) = pods.get(pod).filter(|n| n.as_str() != node) {
                bail!("the agent on {node} names pod {pod}, which runs on {elsewhere}: {volume}");
            }
        }
        if let Some(claim) = volume["claim"].as_str() {
            let others = claims.iter().any(|(n, c)| n != node && c.contains(claim));
            ensure!(own.contains(claim) || !others, "the agent on {node} names claim {claim} of another node's pods");
            named.insert(claim.to_owned());
        }
    }
    ensure!(named.iter().any(|c| own.contains(c)), "the agent on {node} names no claim of its pods: {named:?}");
    Ok(named)
}

pub(super) fn own_node_only(admin: &Kube, logs: &Path, nodes: &[&str]) -> anyhow::Result<String> {
    let log = logs.join(AUDIT_LOG);
    let requests = agent_requests(&fs::read_to_string(&log).with_context(|| format!("reading {}", log.display()))?);
    let watches = pod_reads_per_node(&requests, nodes)?;
    let events: Vec<(String, String)> = admin.get_json(&["events.v1.events.k8s.io", "-n", NS])?["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reportingController"] == "volguard")
        .map(|e| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            (text(&e["metadata"]["name"]), text(&e["reportingInstance"]))
        })
        .collect();
    let per_node = events_from_their_nodes(&requests, &events)?;
    for node in nodes {
        ensure!(per_node.contains_key(*node), "no volguard Event from the agent on {node}: {per_node:?}");
    }
    let (pods, claims) = placement(admin)?;
    let mut views = Vec::new();
    for node in nodes {
        let named = view_is_of_its_node(node, &debug_volumes(admin, node)?, &pods, &claims)?;
        views.push(format!("{node}: {}", named.into_iter().collect::<Vec<_>>().join(", ")));
    }
    Ok(format!(
        "audit log: every pod list and watch of the agents narrowed to the node of their token (watches per node \
         {watches:?}); volguard's Events per node {per_node:?}, each created by its node's agent; /debug/volumes \
         claims per agent: {}",
        views.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn record(id: &str, verb: &str, uri: &str, object: Value, node: &str) -> String {
        json!({
            "kind": "Event", "auditID": id, "stage": "ResponseComplete", "verb": verb, "requestURI": uri,
            "user": {"username": AGENT_USER, "extra": {NODE_NAME_KEY: [node]}},
            "objectRef": object,
        })
        .to_string()
    }

    fn log() -> String {
        let pods = json!({"resource": "pods", "apiVersion": "v1"});
        [
            record("1", "list", "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a&limit=500", pods.clone(), "node-a"),
            record(
                "2",
                "watch",
                "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a&watch=true",
                pods.clone(),
                "node-a",
            ),
            // The same watch again when it ends.
            record(
                "2",
                "watch",
                "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a&watch=true",
                pods.clone(),
                "node-a",
            ),
            record(
                "3",
                "watch",
                "/api/v1/pods?allowWatchBookmarks=true&fieldSelector=spec.nodeName%3Dnode-b",
                pods,
                "node-b",
            ),
            record(
                "4",
                "create",
                "/apis/events.k8s.io/v1/namespaces/e2e/events",
                json!({"resource": "events", "namespace": "e2e", "name": "single-b.1a", "apiGroup": "events.k8s.io"}),
                "node-b",
            ),
            json!({"auditID": "5", "verb": "watch", "user": {"username": "system:kube-scheduler"}}).to_string(),
            "not json".to_owned(),
        ]
        .join("\n")
    }

    #[test]
    fn the_agents_requests_are_read_once_each_with_their_tokens_node_and_field_selector() {
        let requests = agent_requests(&log());
        assert_eq!(requests.len(), 4, "{requests:#?}");
        assert_eq!(requests[0].field_selector.as_deref(), Some("spec.nodeName=node-a"));
        assert_eq!(requests[2].node, "node-b");
        assert_eq!(requests[2].field_selector.as_deref(), Some("spec.nodeName=node-b"));
        assert_eq!((requests[3].verb.as_str(), requests[3].name.as_str()), ("create", "single-b.1a"));
        assert_eq!(
            query_parameter("/x?a=1&fieldSelector=metadata.name%3Dx%2Cy", "fieldSelector").unwrap(),
            "metadata.name=x,y"
        );
        assert_eq!(query_parameter("/x", "fieldSelector"), None);
    }

    #[test]
    fn a_pod_read_beyond_the_tokens_node_or_a_node_without_a_watch_fails() {
        let requests = agent_requests(&log());
        let watches = pod_reads_per_node(&requests, &["node-a", "node-b"]).unwrap();
        assert_eq!(watches, BTreeMap::from([("node-a".to_owned(), 1), ("node-b".to_owned(), 1)]));
        assert!(pod_reads_per_node(&requests, &["node-a", "node-b", "node-c"]).is_err(), "node-c never watched");

        let mut wide = requests.clone();
        wide[1].field_selector = None;
        assert!(pod_reads_per_node(&wide, &["node-a"]).is_err(), "a watch of every pod");
        let mut other = requests.clone();
        other[0].field_selector = Some("spec.nodeName=node-b".into());
        assert!(pod_reads_per_node(&other, &["node-a"]).is_err(), "node-a's agent reading node-b's pods");
    }

    #[test]
    fn an_event_must_be_created_by_the_agent_of_the_node_it_names() {
        let requests = agent_requests(&log());
        let ok = events_from_their_nodes(&requests, &[("single-b.1a".into(), "node-b".into())]).unwrap();
        assert_eq!(ok, BTreeMap::from([("node-b".to_owned(), 1)]));
        assert!(events_from_their_nodes(&requests, &[("single-b.1a".into(), "node-a".into())]).is_err());
        assert!(events_from_their_nodes(&requests, &[("never-created".into(), "node-b".into())]).is_err());
    }

    #[test]
    fn a_view_naming_another_nodes_pod_or_claim_fails() {
        let pods =
            BTreeMap::from([("e2e/a".to_owned(), "node-a".to_owned()), ("e2e/b".to_owned(), "node-b".to_owned())]);
        let claims = BTreeMap::from([
            ("node-a".to_owned(), BTreeSet::from(["e2e/single".to_owned()])),
            ("node-b".to_owned(), BTreeSet::from(["e2e/vm-single".to_owned()])),
        ]);
        let own = json!({"name": "pv-1", "claim": "e2e/single", "pod_names": {"uid-a": "e2e/a"}});
        assert!(view_is_of_its_node("node-a", std::slice::from_ref(&own), &pods, &claims).is_ok());
        let foreign_pod = json!({"name": "pv-1", "claim": "e2e/single", "pod_names": {"uid-b": "e2e/b"}});
        assert!(view_is_of_its_node("node-a", &[own.clone(), foreign_pod], &pods, &claims).is_err());
        let foreign_claim = json!({"name": "pv-2", "claim": "e2e/vm-single", "pod_names": {}});
        assert!(view_is_of_its_node("node-a", &[own, foreign_claim], &pods, &claims).is_err());
        assert!(view_is_of_its_node("node-b", &[], &pods, &claims).is_err(), "an empty view shows nothing");
    }
}

//! What a failed scenario leaves for whoever reads the run: the nodes' readiness, each
//! agent pod's state and its last warnings on stdout (CI keeps only the tail of the
//! output, and a fresh machine's files are gone with it), and in a file each agent's log,
//! its previous container's log after a restart, and a description of any agent pod that
//! is not ready (a rollout that timed out says nothing of why).

use serde_json::Value;

use super::{
    kube::Kube,
    workload::{AGENT_NS, AGENT_SELECTOR},
};

/// The short account printed after a failure, and the whole kept in a file.
pub(super) struct Account {
    pub(super) summary: Vec<String>,
    pub(super) whole: String,
}

pub(super) fn take(admin: &Kube) -> Account {
    let mut summary = nodes(admin);
    let mut whole = String::new();
    let list = admin.get_json(&["pods", "-n", AGENT_NS, "-l", AGENT_SELECTOR]).unwrap_or_else(|e| {
        summary.push(format!("agent pods: {e:#}"));
        Value::Null
    });
    for pod in items(&list) {
        let name = pod["metadata"]["name"].as_str().unwrap_or("?");
        let state = pod_state(pod);
        summary.push(state.clone());
        whole.push_str(&format!("===== {state}\n"));
        let log = logs(admin, &["logs", "-n", AGENT_NS, name, "--tail=-1"]);
        summary.extend(last_warnings(&log).into_iter().map(|line| format!("  {name}: {line}")));
        whole.push_str(&log);
        if restarts(pod) > 0 {
            whole.push_str(&format!("===== {name}: the previous container's log\n"));
            whole.push_str(&logs(admin, &["logs", "-n", AGENT_NS, name, "--previous", "--tail=-1"]));
        }
        if !ready(pod) {
            whole.push_str(&format!("===== {name} is not ready: kubectl describe\n"));
            whole.push_str(&logs(admin, &["describe", "pod", "-n", AGENT_NS, name]));
        }
    }
    whole.push_str("===== every pod\n");
    whole.push_str(&logs(admin, &["get", "pods", "-A", "-o", "wide"]));
    Account { summary, whole }
}

/// Warnings and errors an agent log printed last, at most this many on stdout.
const WARNINGS_SHOWN: usize = 8;
/// Characters of each shown warning (the whole line is in the file).
const WARNING_CHARS: usize = 300;

/// The last [`WARNINGS_SHOWN`] WARN and ERROR lines of an agent's log, shortened.
fn last_warnings(log: &str) -> Vec<String> {
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).collect();
    let shown = &warnings[warnings.len().saturating_sub(WARNINGS_SHOWN)..];
    shown.iter().map(|l| l.chars().take(WARNING_CHARS).collect()).collect()
}

/// Each node's name and Ready condition ("volguard-e2e-vm: Ready=Unknown (NodeStatusUnknown: …)").
fn nodes(admin: &Kube) -> Vec<String> {
    let list = match admin.get_json(&["nodes"]) {
        Ok(list) => list,
        Err(e) => return vec![format!("nodes: {e:#}")],
    };
    items(&list)
        .iter()
        .map(|node| {
            let name = node["metadata"]["name"].as_str().unwrap_or("?");
            let ready = node["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                .map_or_else(
                    || "no Ready condition".to_owned(),
                    |c| format!("Ready={} ({}: {})", text(&c["status"]), text(&c["reason"]), text(&c["message"])),
                );
            format!("node {name}: {ready}")
        })
        .collect()
}

/// One line on an agent pod: where, its phase, readiness, restarts, and why its container
/// last ended or is waiting.
fn pod_state(pod: &Value) -> String {
    let name = text(&pod["metadata"]["name"]);
    let node = text(&pod["spec"]["nodeName"]);
    let phase = text(&pod["status"]["phase"]);
    let mut line = format!("agent pod {name} on {node}: {phase}, ready {}, restarts {}", ready(pod), restarts(pod));
    for status in containers(pod) {
        if let Some(waiting) = status["state"]["waiting"].as_object() {
            line.push_str(&format!("; waiting: {} {}", text(&waiting["reason"]), text(&waiting["message"])));
        }
        if let Some(ended) = status["lastState"]["terminated"].as_object() {
            line.push_str(&format!(
                "; last ended {}: {} (exit {})",
                text(&ended["finishedAt"]),
                text(&ended["reason"]),
                ended["exitCode"]
            ));
        }
    }
    line
}

/// A list's items (none where it is not a list).
fn items(list: &Value) -> &[Value] {
    list["items"].as_array().map_or(&[], Vec::as_slice)
}

fn containers(pod: &Value) -> &[Value] {
    pod["status"]["containerStatuses"].as_array().map_or(&[], Vec::as_slice)
}

fn ready(pod: &Value) -> bool {
    let statuses = containers(pod);
    !statuses.is_empty() && statuses.iter().all(|c| c["ready"] == true)
}

fn restarts(pod: &Value) -> u64 {
    containers(pod).iter().filter_map(|c| c["restartCount"].as_u64()).sum()
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or("-")
}

/// A command's output, or why there is none (a node that is gone has no logs to give).
fn logs(admin: &Kube, args: &[&str]) -> String {
    match admin.run(args) {
        Ok(out) => out,
        Err(e) => format!("(kubectl {}: {e:#})\n", args.join(" ")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{WARNING_CHARS, WARNINGS_SHOWN, last_warnings, pod_state};

    #[test]
    fn an_agent_pods_line_says_why_its_container_ended_and_what_it_waits_for() {
        let pod = json!({
            "metadata": {"name": "volguard-x"},
            "spec": {"nodeName": "volguard-e2e-vm"},
            "status": {"phase": "Running", "containerStatuses": [{
                "ready": false, "restartCount": 2,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s"}},
                "lastState": {"terminated": {"reason": "Error", "exitCode": 1, "finishedAt": "2026-12-02T06:00:00Z"}}
            }]}
        });
        assert_eq!(
            pod_state(&pod),
            "agent pod volguard-x on volguard-e2e-vm: Running, ready false, restarts 2; waiting: CrashLoopBackOff \
             back-off 20s; last ended 2026-12-02T06:00:00Z: Error (exit 1)"
        );
    }

    #[test]
    fn the_last_warnings_are_shown_shortened() {
        let mut log = String::from("2026-12-03T07:04:18Z  INFO volguard::agent: ready\n");
        for i in 0..10 {
            log.push_str(&format!("2026-12-03T07:04:19Z  WARN volguard::agent: warning {i} {}\n", "x".repeat(400)));
        }
        log.push_str("2026-12-03T07:04:20Z ERROR volguard::agent: the last\n");
        let shown = last_warnings(&log);
        assert_eq!(shown.len(), WARNINGS_SHOWN);
        assert!(shown[0].contains("warning 3"), "{shown:?}");
        assert!(shown.iter().all(|l| l.chars().count() <= WARNING_CHARS));
        assert!(shown[WARNINGS_SHOWN - 1].ends_with("the last"));
        assert!(last_warnings("no warnings here\n").is_empty());
    }
}

//! `volguard status | volumes | conflicts | mounts | csi`: the debug API rendered as
//! aligned tables for a person on the node (`--json` passes the API's JSON through for
//! scripts). The client is a plain HTTP/1.0 GET on a local TCP socket ([`client`]): the
//! debug API is local, and the CLI should work even when nothing else on the node does.

use std::{net::SocketAddr, time::Duration};

use serde_json::Value;

use crate::cli::client::{self, GetError};

/// How long the CLI waits for the agent.
const TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(
        "volguard is not running here: nothing answers on {address} ({source}). Start it with `volguard run`, \
         or pass --debug-address if it listens elsewhere"
    )]
    NotRunning {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("talking to the agent on {address}: {source}")]
    Io {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the agent answered {status}: {message}")]
    Http { status: u16, message: String },
    #[error("the agent's answer is not JSON: {0}")]
    NotJson(String),
}

/// Which view to show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    Status,
    Volumes,
    Conflicts,
    Mounts,
    Csi,
    /// Each program's runs and nanoseconds per run (`volguard status --programs`).
    Programs,
}

impl View {
    pub fn path(self) -> &'static str {
        match self {
            Self::Status => "/debug/status",
            Self::Volumes => "/debug/volumes",
            Self::Conflicts => "/debug/conflicts?limit=256",
            Self::Mounts => "/debug/mounts?limit=100",
            Self::Csi => "/debug/csi",
            Self::Programs => "/debug/programs",
        }
    }

    /// The view as a table; `wide` adds pod UIDs (and, for conflicts, the messages).
    pub fn render(self, body: &Value, wide: bool) -> String {
        match self {
            Self::Status => status(body),
            Self::Volumes => volumes(body, wide),
            Self::Conflicts => conflicts(body, wide),
            Self::Mounts => mounts(body),
            Self::Csi => csi(body),
            Self::Programs => programs(body),
        }
    }
}

/// GETs `path` from the debug API and parses the JSON.
pub fn fetch(address: SocketAddr, path: &str) -> Result<Value, CliError> {
    let client::Response { status, body } = client::get(address, path, TIMEOUT).map_err(|e| match e {
        GetError::Connect { source, .. }
            if matches!(source.kind(), std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::TimedOut) =>
        {
            CliError::NotRunning { address, source }
        }
        GetError::Connect { source, .. } | GetError::Io { source, .. } => CliError::Io { address, source },
        GetError::Protocol { message, .. } => CliError::NotJson(message),
    })?;
    let json: Value = serde_json::from_str(&body).map_err(|e| CliError::NotJson(e.to_string()))?;
    if !(200..300).contains(&status) && status != 503 {
        let message = json["error"].as_str().unwrap_or("no message").to_owned();
        return Err(CliError::Http { status, message });
    }
    Ok(json)
}

/// Left-aligned columns separated by two spaces; `-` for empty cells.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let cell = |s: &str| if s.is_empty() { "-".to_owned() } else { s.to_owned() };
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, c) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell(c).chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        padded.join("  ").trim_end().to_owned() + "\n"
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    for row in rows {
        out += &line(row.iter().map(|c| cell(c)).collect());
    }
    out
}

fn s(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(s).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// `namespace/name` of a PodRef, else its UID.
fn pod(v: &Value) -> String {
    match (v["namespace"].as_str(), v["name"].as_str()) {
        (Some(ns), Some(name)) => format!("{ns}/{name}"),
        _ => s(&v["uid"]),
    }
}

/// `command[pid]`, and ` pod <namespace/name>` when the caller was in a pod.
fn mounted_by(v: &Value) -> String {
    if v.is_null() {
        return String::new();
    }
    let process = format!("{}[{}]", s(&v["command"]), s(&v["pid"]));
    match v["pod"].is_null() {
        true => process,
        false => format!("{process} {}", pod(&v["pod"])),
    }
}

fn claim(v: &Value) -> String {
    s(v)
}

/// SystemTime serialises as `{secs_since_epoch, nanos_since_epoch}`: seconds ago.
fn ago(v: &Value) -> String {
    let Some(secs) = v["secs_since_epoch"].as_u64() else { return String::new() };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format!("{}s ago", now.saturating_sub(secs))
}

fn status(b: &Value) -> String {
    let source = &b["source"];
    let stale = match source["stale"].as_str() {
        Some(why) => format!("STALE ({why})"),
        None => "fresh".into(),
    };
    let losses: Vec<&str> =
        b["traceBackendLosses"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let mut rows = vec![
        vec!["ready".into(), s(&b["ready"])],
        vec!["mode".into(), format!("{} ({})", s(&b["mode"]), s(&b["modeReason"]))],
        vec!["tracing".into(), format!("{} ({})", s(&b["traceBackend"]), s(&b["traceBackendReason"]))],
        vec![
            "facts source".into(),
            format!("{} — {stale}, synced {}", s(&source["origin"]), ago(&source["synced_at"])),
        ],
        vec![
            "volumes".into(),
            format!(
                "{} ({} single-pod: {} owned, {} shared; {} quarantined publishes)",
                s(&b["volumes"]),
                s(&b["singlePodVolumes"]),
                s(&b["ownedVolumes"]),
                s(&b["sharedVolumes"]),
                s(&b["quarantinedPublishes"])
            ),
        ],
        vec!["findings".into(), s(&b["findings"])],
        vec!["recent conflicts".into(), s(&b["recentConflicts"])],
        vec!["events lost".into(), s(&b["eventsLost"])],
        vec!["mounts let through undecided (kernel errors)".into(), s(&b["enforceErrors"])],
    ];
    if !losses.is_empty() {
        rows.insert(3, vec!["not reported by this backend".into(), losses.join("; ")]);
    }
    table(&["", ""], &rows).lines().skip(1).map(|l| l.to_owned() + "\n").collect()
}

/// HOLDERS: the pods it is published into; QUARANTINED: pods whose publish was masked
/// (never holders); KUBELET-SENDS: the CSI access mode kubelet puts in NodePublishVolume
/// for it (derived from the PV and the driver's capabilities, not observed).
const VOLUME_COLUMNS: [&str; 10] =
    ["VOLUME", "SINGLE-POD", "STATE", "PVC", "DRIVER", "OWNER", "HOLDERS", "QUARANTINED", "KUBELET-SENDS", "FINDINGS"];

/// A table, or one line saying there is nothing to list (never a bare header).
/// The programs by the time they took, most first; where the kernel does not count, how
/// to have it count.
fn programs(b: &Value) -> String {
    if b["loaded"] != Value::Bool(true) {
        return "no eBPF programs loaded (quarantine with the fanotify backend runs none)\n".into();
    }
    if b["counting"] != Value::Bool(true) {
        return "the kernel is not timing BPF programs: run the agent with --bpf-stats \
                (it turns on kernel.bpf_stats_enabled, node-wide, for its life)\n"
            .into();
    }
    let mut programs: Vec<&Value> = b["programs"].as_array().into_iter().flatten().collect();
    programs.sort_by_key(|p| std::cmp::Reverse(p["runTimeNs"].as_u64().unwrap_or(0)));
    let rows: Vec<Vec<String>> =
        programs.iter().map(|p| vec![s(&p["program"]), s(&p["runs"]), s(&p["nsPerRun"]), s(&p["runTimeNs"])]).collect();
    let header = ["PROGRAM", "RUNS", "NS/RUN", "TOTAL NS"];
    table_or("no program of the agent's is attached", &header, &rows)
        + "NS/RUN: the kernel's run_time_ns / run_cnt since the program was loaded, the timing's own clock reads included\n"
}

fn table_or(nothing: &str, header: &[&str], rows: &[Vec<String>]) -> String {
    match rows.is_empty() {
        true => format!("{nothing}\n"),
        false => table(header, rows),
    }
}

fn volumes(b: &Value, wide: bool) -> String {
    let rows: Vec<Vec<String>> = b["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            // Pods by namespace/name where the facts name them; wide adds the UID.
            let name = |uid: &Value| -> String {
                let uid = s(uid);
                match (v["pod_names"][uid.as_str()].as_str(), wide) {
                    (Some(name), false) => name.to_owned(),
                    (Some(name), true) => format!("{name}({uid})"),
                    (None, _) => uid,
                }
            };
            let names = |list: &Value| -> String {
                list.as_array().into_iter().flatten().map(name).collect::<Vec<_>>().join(",")
            };
            let owner = if v["owner"].is_null() { String::new() } else { name(&v["owner"]) };
            vec![
                s(&v["name"]),
                s(&v["single_pod"]),
                s(&v["state"]),
                claim(&v["claim"]),
                s(&v["driver"]),
                owner,
                names(&v["published_to"]),
                names(&v["quarantined"]),
                s(&v["expected_csi_access_mode"]),
                v["findings"].as_array().map_or(0, Vec::len).to_string(),
            ]
        })
        .collect();
    table_or("no volumes published on this node", &VOLUME_COLUMNS, &rows)
}

fn conflicts(b: &Value, wide: bool) -> String {
    let pod = |v: &Value| match wide {
        true => format!("{}({})", pod(v), s(&v["uid"])),
        false => pod(v),
    };
    let rows: Vec<Vec<String>> = b["conflicts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let mut row = vec![
                ago(&c["at"]),
                s(&c["action"]),
                s(&c["route"]),
                s(&c["volume"]),
                claim(&c["claim"]),
                pod(&c["pod"]),
                pod(&c["owner"]),
                s(&c["mask"]),
                mounted_by(&c["by"]),
            ];
            if wide {
                row.push(s(&c["mount_point"]));
                row.push(s(&c["message"]));
            }
            row
        })
        .collect();
    let mut header = vec!["WHEN", "ACTION", "ROUTE", "VOLUME", "PVC", "POD", "OWNER", "MASK", "MOUNTED-BY"];
    if wide {
        header.push("MOUNT-POINT");
        header.push("MESSAGE");
    }
    table_or("no conflicts since the agent started", &header, &rows)
}

fn mounts(b: &Value) -> String {
    let rows: Vec<Vec<String>> = b["mounts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let result =
                if m["success"].as_bool() == Some(true) { "ok".to_owned() } else { format!("ret {}", s(&m["ret"])) };
            let ms = m["duration_seconds"].as_f64().map_or(String::new(), |d| format!("{:.3}", d * 1e3));
            // A mount notice names no caller.
            let by = match m["pid"].is_null() {
                true => "(not reported)".to_owned(),
                false => format!("{}[{}]", s(&m["comm"]), s(&m["pid"])),
            };
            vec![
                ago(&m["at"]),
                s(&m["operation"]),
                s(&m["volume_plugin"]),
                result,
                ms,
                by,
                s(&m["pod"]),
                s(&m["target"]),
            ]
        })
        .collect();
    let header = ["WHEN", "OPERATION", "PLUGIN", "RESULT", "MS", "BY", "POD-UID", "TARGET"];
    table_or("no volume operations seen yet", &header, &rows)
}

fn csi(b: &Value) -> String {
    let report = &b["csi"];
    if report.is_null() {
        return "no CSI report yet: the CSI checks have not run\n".into();
    }
    let drivers: Vec<Vec<String>> = report["drivers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| vec![s(&d["name"]), s(&d["endpoint"]), s(&d["vendor_version"]), s(&d["node_id"]), s(&d["ready"])])
        .collect();
    let findings: Vec<Vec<String>> = report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| vec![s(&f["severity"]), s(&f["check"]), s(&f["subject"]), s(&f["message"])])
        .collect();
    table_or("no CSI drivers found on this node", &["DRIVER", "ENDPOINT", "VERSION", "NODE-ID", "READY"], &drivers)
        + "\n"
        + &table_or("no CSI findings", &["SEVERITY", "CHECK", "SUBJECT", "MESSAGE"], &findings)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn programs_are_listed_by_their_time_with_nanoseconds_per_run_or_how_to_have_them_timed() {
        let body = serde_json::json!({"loaded": true, "counting": true, "programs": [
            {"program": "file_open", "runs": 10, "runTimeNs": 500, "nsPerRun": 50},
            {"program": "sb_mount", "runs": 0, "runTimeNs": 0, "nsPerRun": null},
            {"program": "path_unlink", "runs": 4, "runTimeNs": 800, "nsPerRun": 200},
        ]});
        let shown = View::Programs.render(&body, false);
        let rows: Vec<&str> = shown.lines().collect();
        assert!(
            rows[0].starts_with("PROGRAM") && rows[1].starts_with("path_unlink") && rows[2].starts_with("file_open")
        );
        assert!(rows[3].starts_with("sb_mount") && rows[3].contains(" - "), "{shown}");
        let off = serde_json::json!({"loaded": true, "counting": false, "programs": []});
        assert!(View::Programs.render(&off, false).contains("--bpf-stats"));
        let none = serde_json::json!({"loaded": false, "counting": false, "programs": []});
        assert!(View::Programs.render(&none, false).contains("no eBPF programs loaded"));
    }

    #[test]
    fn tables_align_and_mark_empty_cells() {
        let t = table(&["A", "LONGER"], &[vec!["x".into(), "".into()], vec!["wide cell".into(), "y".into()]]);
        assert_eq!(t, "A          LONGER\nx          -\nwide cell  y\n");
    }

    #[test]
    fn views_render_the_api_shape() {
        let v = json!({"volumes": [{"name": "pv-1", "single_pod": "ReadWriteOncePod", "claim": "shop/data",
            "driver": "d", "owner": "pod-a", "published_to": ["pod-a"], "quarantined": ["pod-b"], "state": "owned",
            "pod_names": {"pod-a": "shop/db-0"},
            "expected_csi_access_mode": "SINGLE_NODE_WRITER", "findings": []}]});
        let out = View::Volumes.render(&v, false);
        let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(lines[0], VOLUME_COLUMNS, "{out}");
        let row = ["pv-1", "ReadWriteOncePod", "owned", "shop/data", "d", "shop/db-0", "shop/db-0", "pod-b"];
        assert_eq!(lines[1][..8], row, "pods by name where the facts name them: {out}");
        let wide = View::Volumes.render(&v, true);
        assert!(wide.contains("shop/db-0(pod-a)"), "{wide}");

        let m = json!({"mounts": [{"at": {"secs_since_epoch": 0, "nanos_since_epoch": 0}, "operation": "volume_mount",
            "volume_plugin": "kubernetes.io/csi:d", "success": false, "ret": -2, "duration_seconds": 0.0015,
            "comm": "mount", "pid": 7, "pod": null,
            "target": "/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pv-1/mount"}]});
        let out = View::Mounts.render(&m, false);
        assert!(out.starts_with("WHEN"), "{out}");
        assert!(out.contains("volume_mount  kubernetes.io/csi:d  ret -2  1.500  mount[7]  -"), "{out}");

        let c = json!({"conflicts": [{"at": {"secs_since_epoch": 0, "nanos_since_epoch": 0}, "action": "refused",
            "volume": "pv-1", "claim": null, "pod": {"uid": "u-b", "namespace": "shop", "name": "db-1"},
            "owner": {"uid": "u-a", "namespace": null, "name": null},
            "by": {"pid": 42, "command": "mount", "pod": {"uid": "u-d", "namespace": "kube-system", "name": "csi-0"}}}]});
        let out = View::Conflicts.render(&c, false);
        assert!(out.contains("refused") && out.contains("shop/db-1") && out.contains("u-a"), "{out}");
        assert!(View::Conflicts.render(&c, true).contains("shop/db-1(u-b)"));
        assert!(out.contains("mount[42] kube-system/csi-0"), "who made the mount: {out}");
        assert_eq!(View::Csi.render(&json!({"csi": null}), false), "no CSI report yet: the CSI checks have not run\n");
        assert_eq!(View::Volumes.render(&json!({"volumes": []}), false), "no volumes published on this node\n");
        assert_eq!(View::Conflicts.render(&json!({"conflicts": []}), false), "no conflicts since the agent started\n");
        let csi = View::Csi.render(&json!({"csi": {"drivers": [], "findings": []}}), false);
        assert_eq!(csi, "no CSI drivers found on this node\n\nno CSI findings\n");
        let st = View::Status.render(
            &json!({"ready": true, "mode": "enforce", "modeReason": "auto",
            "traceBackend": "tracepoints", "traceBackendReason": "auto: the kernel refuses trampolines (EPERM)",
            "source": {"origin": "inventory", "stale": "bad line 3", "synced_at": null}, "enforceErrors": 3}),
            false,
        );
        assert!(st.contains("mode") && st.contains("enforce (auto)") && st.contains("STALE (bad line 3)"), "{st}");
        assert!(st.contains("tracepoints (auto: the kernel refuses trampolines (EPERM))"), "{st}");
        assert!(st.lines().any(|l| l.contains("let through undecided") && l.trim_end().ends_with(" 3")), "{st}");
        assert!(!st.contains("not reported"), "the syscall backends lose nothing: {st}");
        let st = View::Status.render(
            &json!({"traceBackend": "fanotify", "traceBackendReason": "auto", "traceBackendLosses": ["the caller", "latency"],
            "source": {}}),
            false,
        );
        assert!(st.lines().any(|l| l.contains("not reported") && l.contains("the caller; latency")), "{st}");
    }

    #[test]
    fn a_missing_agent_is_a_clear_message() {
        // A port nothing listens on: bind, note, drop.
        let address = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let e = fetch(address, "/debug/status").unwrap_err();
        assert!(e.to_string().starts_with("volguard is not running here"), "{e}");
    }

    #[test]
    fn fetch_talks_to_the_real_debug_router() {
        let shared = std::sync::Arc::new(crate::outputs::served_state::ServedState::new(json!({"k": 1})));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let router = crate::outputs::http::debug_router(shared);
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, router).await.unwrap();
            });
        });
        assert_eq!(fetch(address, "/debug/config").unwrap()["config"]["k"], 1);
        let e = fetch(address, "/debug/volumes/nope").unwrap_err();
        assert!(matches!(e, CliError::Http { status: 404, .. }), "{e}");
        let ready = fetch(address, "/readyz").unwrap();
        assert_eq!(ready["ready"], false, "503 still carries the JSON");
    }
}

//! The agent's two HTTP listeners (axum): `/metrics` for Prometheus, on its own address,
//! and the read-only debug API, on localhost by default. Every error is JSON with a 4xx.

use std::{collections::HashMap, sync::Arc};

use axum::{
    Json, Router,
    extract::{Path, Query, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use serde_json::{Value, json};

use crate::csi::report::CsiReport;
use crate::outputs::metrics::SinglePodCounts;
use crate::outputs::served_state::{API_VERSION, CONFLICTS_KEPT, MOUNTS_KEPT, ServedState};

/// The default `/metrics` address: every interface, so Prometheus can scrape the pod.
pub const DEFAULT_METRICS_ADDRESS: &str = "0.0.0.0:9728";
/// The default debug API address: this node only.
pub const DEFAULT_DEBUG_ADDRESS: &str = "127.0.0.1:9729";
/// How many entries the list routes return without `?limit=`.
const DEFAULT_LIMIT: usize = 50;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type AppState = State<Arc<ServedState>>;

pub fn metrics_router(shared: Arc<ServedState>) -> Router {
    // The health routes are here too: kubelet's probes reach the pod's address, not its
    // localhost, and they reveal nothing about the node.
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such path: metrics are at /metrics") })
        .method_not_allowed_fallback(|| async { error(StatusCode::METHOD_NOT_ALLOWED, "only GET") })
        .with_state(shared)
}

pub fn debug_router(shared: Arc<ServedState>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/debug/status", get(status))
        .route("/debug/volumes", get(volumes))
        .route("/debug/volumes/{name}", get(volume))
        .route("/debug/conflicts", get(conflicts))
        .route("/debug/mounts", get(mounts))
        .route("/debug/csi", get(csi))
        .route("/debug/config", get(config))
        .route("/debug/programs", get(programs))
        .fallback(|| async {
            error(
                StatusCode::NOT_FOUND,
                "no such path; try /healthz, /readyz, /debug/status, /debug/volumes, /debug/volumes/{name}, \
                 /debug/conflicts, /debug/mounts, /debug/csi, /debug/config",
            )
        })
        .method_not_allowed_fallback(|| async {
            error(StatusCode::METHOD_NOT_ALLOWED, "the debug API is read-only: GET")
        })
        .layer(axum::middleware::from_fn(refuse_parameters_where_none_are_taken))
        .with_state(shared)
}

/// The routes that take `?limit=`; every other debug route takes no parameter, and a
/// misspelt one must be an error rather than silently ignored.
const ROUTES_WITH_LIMIT: [&str; 2] = ["/debug/conflicts", "/debug/mounts"];

async fn refuse_parameters_where_none_are_taken(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let uri = request.uri();
    if uri.query().is_some_and(|q| !q.is_empty()) && !ROUTES_WITH_LIMIT.contains(&uri.path()) {
        let message =
            format!("{} takes no parameters (only {} take ?limit=)", uri.path(), ROUTES_WITH_LIMIT.join(" and "));
        return error(StatusCode::BAD_REQUEST, &message);
    }
    next.run(request).await
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({"apiVersion": API_VERSION, "error": message, "status": status.as_u16()}))).into_response()
}

fn ok(body: Value) -> Response {
    let mut body = body;
    if let Value::Object(map) = &mut body {
        map.insert("apiVersion".into(), API_VERSION.into());
    }
    Json(body).into_response()
}

/// `{"apiVersion": …, "<key>": value}` as `ok` writes it, but straight from `value`: a big
/// answer (10,000 volumes) made as a JSON value first took tens of MiB on its way to 2 MB
/// of text.
fn ok_large(key: &'static str, value: &impl serde::Serialize) -> Response {
    use serde::ser::{SerializeMap, Serializer};
    let mut out = Vec::new();
    let written = serde_json::Serializer::new(&mut out).serialize_map(Some(2)).and_then(|mut map| {
        // `ok`'s keys come sorted; "apiVersion" sorts before both keys used here.
        map.serialize_entry("apiVersion", API_VERSION)?;
        map.serialize_entry(key, value)?;
        map.end()
    });
    match written {
        Ok(()) => ([(header::CONTENT_TYPE, "application/json")], out).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &format!("rendering {key}: {e}")),
    }
}

/// `?limit=N` (1..=max); any other parameter, or a bad value, is an error for a 400.
fn limit(params: &HashMap<String, String>, max: usize) -> Result<usize, String> {
    if let Some(unknown) = params.keys().find(|k| *k != "limit") {
        return Err(format!("unknown parameter {unknown:?}; only limit"));
    }
    match params.get("limit") {
        None => Ok(DEFAULT_LIMIT.min(max)),
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(format!("limit must be a whole number from 1 to {max}, got {text:?}")),
        },
    }
}

async fn metrics(State(shared): AppState) -> Response {
    ([(header::CONTENT_TYPE, OPENMETRICS)], shared.metrics.encode()).into_response()
}

async fn healthz() -> Response {
    ok(json!({"status": "ok"}))
}

/// Ready once the programs are attached, the state is built and, with the Kubernetes API
/// as the source, a first complete list has come: an agent that cannot reach or is refused
/// by the API server holds a rollout at its first node. Facts that go stale later keep it
/// ready (they stay in force; enforcement goes on), said in `detail`.
async fn readyz(State(shared): AppState) -> Response {
    let view = shared.view();
    let (ready, detail) = if !shared.is_ready() {
        (false, "starting".to_owned())
    } else if let Some(waiting) = view.source.first_sync_pending() {
        (false, format!("programs attached, no facts yet: {waiting}"))
    } else if let Some(stale) = &view.source.stale {
        (true, format!("programs attached, state built; facts stale: {stale}"))
    } else {
        (true, "programs attached, state built".to_owned())
    };
    let body = json!({"apiVersion": API_VERSION, "ready": ready, "detail": detail});
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(body)).into_response()
}

/// Each of the agent's programs' runs and run time as the kernel counts them (with
/// `--bpf-stats`), and the mean time of a run: what each hook adds to the call it runs on.
async fn programs(State(shared): AppState) -> Response {
    let Some((counting, runs)) = shared.metrics.kernel.program_runs() else {
        return ok(json!({"loaded": false, "counting": false, "programs": []}));
    };
    let programs: Vec<Value> = runs
        .iter()
        .map(|r| {
            let nanos = u64::try_from(r.run_time.as_nanos()).unwrap_or(u64::MAX);
            let per_run = nanos.checked_div(r.runs);
            json!({"program": r.program, "runs": r.runs, "runTimeNs": nanos, "nsPerRun": per_run})
        })
        .collect();
    ok(json!({"loaded": true, "counting": counting, "programs": programs}))
}

async fn status(State(shared): AppState) -> Response {
    let snap = shared.view();
    let single_pod = snap.volumes.iter().filter(|v| v.view.single_pod.is_some()).count();
    // The metrics' classification, so status and metrics never disagree.
    let counts = SinglePodCounts::of(snap.volumes.iter().map(|v| &v.view));
    let tracing = shared.tracing();
    ok(json!({
        "ready": shared.is_ready(),
        "mode": snap.mode,
        "modeReason": snap.mode_reason,
        "traceBackend": tracing.as_ref().map(|t| t.backend),
        "traceBackendReason": tracing.as_ref().map(|t| t.reason.clone()),
        "traceFallbacks": tracing.as_ref().map(|t| t.fallbacks.clone()).unwrap_or_default(),
        "traceBackendLosses": tracing.as_ref().map(|t| t.losses).unwrap_or_default(),
        "source": snap.source,
        "volumes": snap.volumes.len(),
        "singlePodVolumes": single_pod,
        "ownedVolumes": counts.owned,
        "sharedVolumes": counts.shared,
        "quarantinedPublishes": counts.quarantined_publishes,
        "findings": snap.findings.len() + csi_findings(&snap.csi),
        "recentConflicts": shared.recent_conflicts(CONFLICTS_KEPT).len(),
        "eventsLost": shared.metrics.operations.events_lost(),
        // Mounts the LSM programs let through because they could not decide.
        "enforceErrors": shared.metrics.kernel.get(volguard_common::counters::Counter::EnforceErrors),
        "updatedAt": snap.updated_at,
        "viewRefresh": snap.refresh,
    }))
}

fn csi_findings(csi: &Option<Arc<CsiReport>>) -> usize {
    csi.as_ref().map_or(0, |c| c.findings.len())
}

async fn volumes(State(shared): AppState) -> Response {
    // Thousands of volumes take milliseconds to render: not on a runtime worker.
    let view = shared.view();
    crate::sys::background::spawn(move || ok_large("volumes", &view.volumes))
        .await
        .unwrap_or_else(|e| error(StatusCode::INTERNAL_SERVER_ERROR, &format!("rendering the volumes: {e}")))
}

async fn volume(State(shared): AppState, Path(name): Path<String>) -> Response {
    match shared.view().volumes.iter().find(|v| v.view.name == name) {
        Some(v) => ok(json!({"volume": v})),
        None => error(StatusCode::NOT_FOUND, &format!("no volume {name:?} is published or single-pod on this node")),
    }
}

async fn conflicts(State(shared): AppState, Query(params): Query<HashMap<String, String>>) -> Response {
    match limit(&params, CONFLICTS_KEPT) {
        Ok(n) => ok(json!({"conflicts": shared.recent_conflicts(n)})),
        Err(message) => error(StatusCode::BAD_REQUEST, &message),
    }
}

async fn mounts(State(shared): AppState, Query(params): Query<HashMap<String, String>>) -> Response {
    match limit(&params, MOUNTS_KEPT) {
        Ok(n) => ok(json!({"mounts": shared.recent_mounts(n)})),
        Err(message) => error(StatusCode::BAD_REQUEST, &message),
    }
}

async fn csi(State(shared): AppState) -> Response {
    // A report of thousands of volumes, as the volumes route: not on a runtime worker.
    let report = shared.view().csi.clone();
    crate::sys::background::spawn(move || ok_large("csi", &report))
        .await
        .unwrap_or_else(|e| error(StatusCode::INTERNAL_SERVER_ERROR, &format!("rendering the CSI report: {e}")))
}

async fn config(State(shared): AppState) -> Response {
    ok(json!({"config": shared.config}))
}

#[cfg(test)]
mod tests {
    use axum::body::{Body, to_bytes};
    use tower::ServiceExt as _;

    use super::*;
    use crate::{
        facts::Facts,
        model::explain::{Conflict, ConflictAction},
        outputs::served_state::{ConflictRecord, DebugView, MountRecord, SourceStatus, VolumeDetail},
    };

    fn shared() -> Arc<ServedState> {
        let shared = Arc::new(ServedState::new(json!({"kubeletRoot": "/var/lib/kubelet"})));
        let volume = VolumeDetail::from(crate::model::mounts::VolumeView {
            name: "pv-1".into(),
            single_pod: Some(crate::facts::SinglePodReason::ReadWriteOncePod),
            claim: None,
            driver: Some("d".into()),
            owner: Some("pod-a".into()),
            published_to: vec!["pod-a".into()],
            quarantined: vec!["pod-b".into()],
            state: Some(crate::model::mounts::SinglePodState::Owned),
            pod_names: Default::default(),
        });
        shared.set_view(DebugView {
            mode: Some(crate::enforce::Mode::Quarantine),
            volumes: vec![volume],
            ..DebugView::default()
        });
        for i in 0..3 {
            let c =
                Conflict::resolve(&Facts::default(), ConflictAction::Quarantined, "pv-1", &format!("p{i}"), "pod-a");
            shared.record_conflict(ConflictRecord::new(&c));
        }
        shared.record_mount(
            MountRecord::new(
                std::time::SystemTime::now(),
                "volume_mount",
                "mount",
                "/x".into(),
                "kubernetes.io/csi:d".into(),
                0,
            )
            .by(0.01, 7, "csi".into(), None),
        );
        shared
    }

    async fn get(router: Router, uri: &str) -> (StatusCode, Value) {
        request(router, "GET", uri).await
    }

    async fn request(router: Router, method: &str, uri: &str) -> (StatusCode, Value) {
        let req = axum::http::Request::builder().method(method).uri(uri).body(Body::empty()).unwrap();
        let response = router.oneshot(req).await.unwrap();
        let status = response.status();
        let bytes = to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    #[tokio::test]
    async fn not_ready_until_the_api_has_listed_once_and_ready_while_its_facts_go_stale() {
        let s = shared();
        s.set_ready();
        let with_source = |source: SourceStatus| s.set_view(DebugView { source, ..DebugView::default() });
        let waiting = crate::facts::AWAITING_FIRST_LIST;
        with_source(SourceStatus::new("kubernetes_api", Some(waiting.into()), None));
        let (code, body) = get(debug_router(s.clone()), "/readyz").await;
        assert_eq!((code, body["ready"].as_bool()), (StatusCode::SERVICE_UNAVAILABLE, Some(false)));
        assert!(body["detail"].as_str().unwrap().contains(waiting), "{body}");

        let synced = Some(std::time::SystemTime::now());
        with_source(SourceStatus::new("kubernetes_api", Some("pods: client error (Connect)".into()), synced));
        let (code, body) = get(debug_router(s.clone()), "/readyz").await;
        assert_eq!(code, StatusCode::OK, "stale facts stay in force: {body}");
        assert!(body["detail"].as_str().unwrap().contains("facts stale: pods: client error (Connect)"), "{body}");

        for source in [SourceStatus::new("none", None, None), SourceStatus::new("inventory", None, None)] {
            with_source(source);
            assert_eq!(get(debug_router(s.clone()), "/readyz").await.0, StatusCode::OK, "no API to wait for");
        }
    }

    #[tokio::test]
    async fn every_debug_route_answers_versioned_json() {
        let s = shared();
        let r = || debug_router(s.clone());
        let (code, body) = get(r(), "/healthz").await;
        assert_eq!(
            (code, body["status"].as_str(), body["apiVersion"].as_str()),
            (StatusCode::OK, Some("ok"), Some(API_VERSION))
        );
        assert_eq!(get(r(), "/readyz").await.0, StatusCode::SERVICE_UNAVAILABLE, "not ready before the state is built");
        s.set_ready();
        assert_eq!(get(r(), "/readyz").await.0, StatusCode::OK);
        let (_, body) = get(r(), "/debug/status").await;
        assert_eq!((body["mode"].as_str(), body["singlePodVolumes"].as_u64()), (Some("quarantine"), Some(1)));
        let counts = ["ownedVolumes", "sharedVolumes", "quarantinedPublishes"].map(|k| body[k].as_u64());
        assert_eq!(counts, [Some(1), Some(0), Some(1)], "the metrics' classification");
        let (_, body) = get(r(), "/debug/volumes").await;
        assert_eq!(body["volumes"][0]["owner"], "pod-a");
        let (code, body) = get(r(), "/debug/volumes/pv-1").await;
        assert_eq!((code, body["volume"]["driver"].as_str()), (StatusCode::OK, Some("d")));
        let (_, body) = get(r(), "/debug/conflicts?limit=2").await;
        let pods: Vec<_> = body["conflicts"].as_array().unwrap().iter().map(|c| c["pod"]["uid"].clone()).collect();
        assert_eq!(pods, [json!("p2"), json!("p1")], "newest first, limited");
        let (_, body) = get(r(), "/debug/mounts").await;
        assert_eq!(body["mounts"][0]["operation"], "volume_mount");
        let (_, body) = get(r(), "/debug/csi").await;
        assert_eq!(body["csi"], Value::Null, "null until the CSI checks ran");
        let (_, body) = get(r(), "/debug/config").await;
        assert_eq!(body["config"]["kubeletRoot"], "/var/lib/kubelet");
    }

    #[tokio::test]
    async fn bad_paths_parameters_and_methods_are_json_4xx() {
        let s = shared();
        let r = || debug_router(s.clone());
        for (method, uri, want) in [
            ("GET", "/debug/volumes/nope", StatusCode::NOT_FOUND),
            ("GET", "/debug/nothing", StatusCode::NOT_FOUND),
            ("GET", "/debug/conflicts?limit=0", StatusCode::BAD_REQUEST),
            ("GET", "/debug/conflicts?limit=abc", StatusCode::BAD_REQUEST),
            ("GET", "/debug/mounts?limit=100000", StatusCode::BAD_REQUEST),
            ("GET", "/debug/mounts?since=5", StatusCode::BAD_REQUEST),
            ("GET", "/debug/volumes?x=1", StatusCode::BAD_REQUEST),
            ("GET", "/debug/volumes/pv-1?verbose=1", StatusCode::BAD_REQUEST),
            ("GET", "/debug/status?x", StatusCode::BAD_REQUEST),
            ("GET", "/debug/csi?driver=d", StatusCode::BAD_REQUEST),
            ("GET", "/debug/config?x=1", StatusCode::BAD_REQUEST),
            ("GET", "/healthz?x=1", StatusCode::BAD_REQUEST),
            ("GET", "/readyz?x=1", StatusCode::BAD_REQUEST),
            ("POST", "/debug/volumes", StatusCode::METHOD_NOT_ALLOWED),
            ("DELETE", "/healthz", StatusCode::METHOD_NOT_ALLOWED),
        ] {
            let (code, body) = request(r(), method, uri).await;
            assert_eq!(code, want, "{method} {uri}");
            assert!(body["error"].as_str().is_some_and(|e| !e.is_empty()), "{method} {uri}: {body}");
            assert_eq!(body["status"], want.as_u16());
        }
    }

    #[test]
    fn the_debug_api_is_local_by_default() {
        let address: std::net::SocketAddr = DEFAULT_DEBUG_ADDRESS.parse().unwrap();
        assert!(address.ip().is_loopback(), "only the node itself may reach the debug API by default");
    }

    #[tokio::test]
    async fn metrics_are_openmetrics_on_their_own_router() {
        let s = shared();
        s.metrics.operations.syscall("mount", true);
        let req = axum::http::Request::builder().uri("/metrics").body(Body::empty()).unwrap();
        let response = metrics_router(s.clone()).oneshot(req).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[header::CONTENT_TYPE], OPENMETRICS);
        let text = String::from_utf8(to_bytes(response.into_body(), 1 << 20).await.unwrap().to_vec()).unwrap();
        assert!(text.contains("volguard_mount_syscalls_total{syscall=\"mount\",result=\"success\"} 1"));
        assert_eq!(get(metrics_router(s.clone()), "/debug/volumes").await.0, StatusCode::NOT_FOUND, "kept apart");
        assert_eq!(get(debug_router(s.clone()), "/metrics").await.0, StatusCode::NOT_FOUND);
        assert_eq!(get(metrics_router(s), "/healthz").await.0, StatusCode::OK, "for kubelet's probes");
    }
}

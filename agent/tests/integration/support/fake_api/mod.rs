//! A fake Kubernetes API server for the k8s source tests: real HTTP on 127.0.0.1 (axum),
//! list and watch for pods, PVs, PVCs (cluster-wide and in one namespace), CSIDrivers,
//! CSINodes and Nodes, honouring field selectors such as `metadata.name=X` and
//! `spec.nodeName=X` as the real server does; GET of one Node, a sink for created Events,
//! and TokenReviews and SubjectAccessReviews answered from the tokens and the `/metrics`
//! readers the test declares ([`FakeApi::accept_token`], [`FakeApi::allow_metrics`]). The test drives it: apply/delete objects (watchers get ADDED/MODIFIED/DELETED),
//! send BOOKMARKs, expire watches (the next watch answers ERROR 410 Gone), fail lists,
//! stop it (connections refused) and restart it on the same port.
//!
//! Watches replay the events after the requested resourceVersion, as the real server does,
//! so a watch opened a little after the list misses nothing.
//!
//! [`objects`] makes the objects the tests apply.

use std::{
    collections::{BTreeMap, HashMap},
    convert::Infallible,
    future::Future,
    net::SocketAddr,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{
    Json, Router,
    body::{Body, Bytes},
    extract::{Path, Query, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::{MethodRouter, get, post},
};
use serde_json::{Value, json};

use super::tls::{self, TlsIdentity};

mod handlers;
mod objects;

use handlers::*;
pub use objects::*;
use tokio::{
    net::TcpListener,
    sync::{mpsc, oneshot},
    task::JoinHandle,
};

pub const PODS: &str = "pods";
pub const PVS: &str = "persistentvolumes";
pub const PVCS: &str = "persistentvolumeclaims";
pub const CSI_DRIVERS: &str = "csidrivers";
pub const CSI_NODES: &str = "csinodes";
pub const NODES: &str = "nodes";

const CLUSTER_SCOPED: [&str; 4] = [PVS, CSI_DRIVERS, CSI_NODES, NODES];

/// (resource, URL path, apiVersion, kind)
const RESOURCES: [(&str, &str, &str, &str); 6] = [
    (PODS, "/api/v1/pods", "v1", "Pod"),
    (PVS, "/api/v1/persistentvolumes", "v1", "PersistentVolume"),
    (PVCS, "/api/v1/persistentvolumeclaims", "v1", "PersistentVolumeClaim"),
    (CSI_DRIVERS, "/apis/storage.k8s.io/v1/csidrivers", "storage.k8s.io/v1", "CSIDriver"),
    (CSI_NODES, "/apis/storage.k8s.io/v1/csinodes", "storage.k8s.io/v1", "CSINode"),
    (NODES, "/api/v1/nodes", "v1", "Node"),
];

/// The namespaced path of PVCs: `/api/v1/namespaces/{namespace}/persistentvolumeclaims`.
const NAMESPACED_PVCS: &str = "/api/v1/namespaces/{namespace}/persistentvolumeclaims";

/// One request the fake answered: the resource (or path), the namespace of a namespaced
/// path, and its decoded query parameters.
#[derive(Clone, Debug)]
pub struct Request {
    pub resource: String,
    pub namespace: Option<String>,
    pub params: HashMap<String, String>,
}

impl Request {
    pub fn is_watch(&self) -> bool {
        matches!(self.params.get("watch").map(String::as_str), Some("true" | "1"))
    }

    pub fn field_selector(&self) -> Option<&str> {
        self.params.get("fieldSelector").map(String::as_str)
    }
}

/// What one list or watch asks for: objects of one namespace (or all), matching a field selector.
#[derive(Clone, Debug, Default)]
struct Scope {
    namespace: Option<String>,
    selector: Option<String>,
}

impl Scope {
    /// The one key a `metadata.name=X` selector can match, for a lookup instead of a scan
    /// (tens of thousands of objects): `ns/X` in a namespace, `X` for cluster-scoped kinds.
    fn only_key(&self, resource: &str) -> Option<String> {
        let name = self.selector.as_deref()?.strip_prefix("metadata.name=").filter(|n| !n.contains(','))?;
        match &self.namespace {
            Some(namespace) => Some(format!("{namespace}/{name}")),
            None => CLUSTER_SCOPED.contains(&resource).then(|| name.to_owned()),
        }
    }

    fn includes(&self, object: &Value) -> bool {
        let in_namespace =
            self.namespace.as_deref().is_none_or(|ns| object["metadata"]["namespace"].as_str() == Some(ns));
        in_namespace && matches(object, self.selector.as_deref())
    }
}

struct Watcher {
    scope: Scope,
    tx: mpsc::UnboundedSender<Bytes>,
}

#[derive(Default)]
struct Collection {
    api_version: &'static str,
    kind: &'static str,
    objects: BTreeMap<String, Value>,
    /// (resourceVersion, watch event) of every change, for watches that resume.
    history: Vec<(u64, Value)>,
    watchers: Vec<Watcher>,
    gone_next_watch: bool,
    fail_lists: bool,
    /// Set by [`FakeApi::slow_lists`]: each list waits this long before it is answered.
    list_delay: Option<Duration>,
    lists_in_flight: usize,
    most_lists_in_flight: usize,
}

#[derive(Default)]
struct Inner {
    resource_version: u64,
    collections: BTreeMap<&'static str, Collection>,
    requests: Vec<Request>,
    events: Vec<Value>,
    /// Set by [`FakeApi::stop`] until [`FakeApi::restart`]: lists and watches that still
    /// arrive on an open connection are refused, so no new watch keeps the server up.
    stopping: bool,
    /// Requests answered, by HTTP version (`"HTTP/1.1"`, `"HTTP/2.0"`).
    http_versions: BTreeMap<String, usize>,
    /// Token -> the UserInfo its TokenReview answers.
    tokens: HashMap<String, Value>,
    /// Usernames whose SubjectAccessReview for `get /metrics` is allowed.
    metrics_readers: Vec<String>,
    /// The reviews asked (request bodies), TokenReviews and SubjectAccessReviews alike.
    reviews: Vec<Value>,
}

type Shared = Arc<Mutex<Inner>>;

pub struct FakeApi {
    addr: SocketAddr,
    inner: Shared,
    server: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
    /// Set by [`FakeApi::start_tls`]: served over TLS, HTTP/2 offered.
    tls: Option<TlsIdentity>,
    /// TCP connections accepted (counted over TLS only).
    connections: Arc<AtomicUsize>,
}

fn lock(inner: &Shared) -> MutexGuard<'_, Inner> {
    // A test that panicked while holding the lock fails anyway; keep going for its report.
    inner.lock().unwrap_or_else(|e| e.into_inner())
}

fn key(object: &Value) -> String {
    let meta = &object["metadata"];
    match (meta["namespace"].as_str(), meta["name"].as_str()) {
        (Some(ns), Some(name)) => format!("{ns}/{name}"),
        (None, Some(name)) => name.to_owned(),
        _ => panic!("fake API objects need metadata.name: {object}"),
    }
}

/// `a.b=value,c=value` against the object's JSON.
fn matches(object: &Value, selector: Option<&str>) -> bool {
    let Some(selector) = selector.filter(|s| !s.is_empty()) else { return true };
    selector.split(',').all(|term| {
        let (path, want) = term.split_once("==").or_else(|| term.split_once('=')).unwrap_or((term, ""));
        let got = path.split('.').fold(object, |v, part| &v[part]);
        got.as_str() == Some(want)
    })
}

async fn count_version(State(inner): State<Shared>, request: axum::extract::Request) -> axum::extract::Request {
    *lock(&inner).http_versions.entry(format!("{:?}", request.version())).or_default() += 1;
    request
}

fn line(event: &Value) -> Bytes {
    let mut text = event.to_string();
    text.push('\n');
    Bytes::from(text)
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

impl FakeApi {
    /// Plain HTTP/1.1 on 127.0.0.1.
    pub async fn start() -> Self {
        Self::start_with(None).await
    }

    /// TLS on 127.0.0.1 with ALPN `h2` then `http/1.1`, as a real API server; clients
    /// trust it through [`FakeApi::kubeconfig`].
    pub async fn start_tls() -> Self {
        Self::start_with(Some(TlsIdentity::for_loopback())).await
    }

    async fn start_with(tls: Option<TlsIdentity>) -> Self {
        let inner: Shared = Arc::default();
        {
            let mut guard = lock(&inner);
            for (resource, _, api_version, kind) in RESOURCES {
                guard.collections.insert(resource, Collection { api_version, kind, ..Collection::default() });
            }
            guard.resource_version = 100;
        }
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let mut fake = Self { addr, inner, server: None, tls, connections: Arc::default() };
        fake.serve(listener);
        fake
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// A kubeconfig in `dir` pointing at the fake (no credentials; over TLS, trusting its
    /// CA), for an agent process.
    pub fn kubeconfig(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let path = dir.join("kubeconfig");
        let authority = match &self.tls {
            Some(tls) => {
                let ca = dir.join("fake-api-ca.pem");
                std::fs::write(&ca, &tls.ca_pem).expect("write the fake API's CA");
                format!(", certificate-authority: \"{}\"", ca.display())
            }
            None => String::new(),
        };
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"{}\"{authority}}}\n\
             users:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context: {{cluster: fake, user: u}}\ncurrent-context: c\n",
            self.url()
        );
        std::fs::write(&path, text).expect("write the kubeconfig");
        path
    }

    /// The agent's own client ([`volguard::facts::k8s::client::http2_client`]) for the fake:
    /// HTTP/1.1 over plain http, HTTP/2 over TLS.
    pub fn client(&self) -> kube::Client {
        let uri = self.url().parse().expect("fake API URL");
        let mut config = kube::Config::new(uri);
        config.root_cert = self.tls.as_ref().map(|tls| vec![tls.ca_der.clone()]);
        volguard::facts::k8s::client::http2_client(config).expect("kube client for the fake API")
    }

    fn serve(&mut self, listener: TcpListener) {
        let mut router = Router::new();
        for (resource, path, _, _) in RESOURCES {
            router = router.route(path, collection_route(resource));
        }
        let router = router
            .route(NAMESPACED_PVCS, namespaced_route(PVCS))
            .route("/api/v1/nodes/{name}", get(get_node))
            .route("/apis/events.k8s.io/v1/namespaces/{namespace}/events", post(create_event))
            .route("/apis/authentication.k8s.io/v1/tokenreviews", post(token_review))
            .route("/apis/authorization.k8s.io/v1/subjectaccessreviews", post(access_review))
            .fallback(|uri: axum::http::Uri, State(inner): State<Shared>| async move {
                lock(&inner).requests.push(Request {
                    resource: uri.path().to_owned(),
                    namespace: None,
                    params: HashMap::new(),
                });
                (StatusCode::NOT_FOUND, Json(status(404, "NotFound", "the fake API has no such path")))
            })
            .layer(axum::middleware::map_request_with_state(self.inner.clone(), count_version))
            .with_state(self.inner.clone());
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let stopped = async move {
            let _ = stop_rx.await;
        };
        let task = match self.tls.clone() {
            Some(identity) => tokio::spawn(tls::serve(listener, router, identity, self.connections.clone(), stopped)),
            None => tokio::spawn(async move {
                let _ = axum::serve(listener, router).with_graceful_shutdown(stopped).await;
            }),
        };
        self.server = Some((stop_tx, task));
    }

    /// Stops listening and ends every watch: clients get "connection refused" until
    /// [`FakeApi::restart`]. The objects are kept.
    pub async fn stop(&mut self) {
        {
            let mut guard = lock(&self.inner);
            guard.stopping = true;
            for c in guard.collections.values_mut() {
                c.watchers.clear();
            }
        }
        if let Some((stop, mut task)) = self.server.take() {
            let _ = stop.send(());
            if tokio::time::timeout(Duration::from_secs(5), &mut task).await.is_err() {
                task.abort();
            }
        }
    }

    /// Listens again on the same address.
    pub async fn restart(&mut self) {
        let listener = TcpListener::bind(self.addr).await.expect("bind the same port again");
        lock(&self.inner).stopping = false;
        self.serve(listener);
    }

    fn with<T>(&self, resource: &str, f: impl FnOnce(&mut Collection, u64) -> T) -> T {
        let mut guard = lock(&self.inner);
        guard.resource_version += 1;
        let rv = guard.resource_version;
        let c = guard.collections.get_mut(resource).expect("known resource");
        f(c, rv)
    }

    /// Adds or replaces an object; watchers get ADDED or MODIFIED.
    pub fn apply(&self, resource: &str, mut object: Value) {
        self.with(resource, |c, rv| {
            object["apiVersion"] = json!(c.api_version);
            object["kind"] = json!(c.kind);
            object["metadata"]["resourceVersion"] = json!(rv.to_string());
            let k = key(&object);
            let kind = if c.objects.contains_key(&k) { "MODIFIED" } else { "ADDED" };
            c.objects.insert(k, object.clone());
            c.send(rv, json!({"type": kind, "object": object}));
        });
    }

    /// Deletes an object (`namespace/name` or `name`); watchers get DELETED.
    pub fn delete(&self, resource: &str, key: &str) {
        self.with(resource, |c, rv| {
            if let Some(mut object) = c.objects.remove(key) {
                object["metadata"]["resourceVersion"] = json!(rv.to_string());
                c.send(rv, json!({"type": "DELETED", "object": object}));
            }
        });
    }

    /// Sends a BOOKMARK with the current resourceVersion to the open watches.
    pub fn bookmark(&self, resource: &str) {
        self.with(resource, |c, rv| {
            let event = json!({"type": "BOOKMARK", "object": {"apiVersion": c.api_version, "kind": c.kind,
                "metadata": {"resourceVersion": rv.to_string()}}});
            c.watchers.retain(|w| w.tx.send(line(&event)).is_ok());
        });
    }

    /// Ends every open watch of `resource`, as the server does when a watch's timeout is up.
    pub fn end_watches(&self, resource: &str) {
        lock(&self.inner).collections.get_mut(resource).expect("known resource").watchers.clear();
    }

    /// Sends `text` as one line to every open watch of `resource`, as is: for malformed events.
    pub fn send_raw_line(&self, resource: &str, text: &str) {
        let line = Bytes::from(format!("{text}\n"));
        let mut guard = lock(&self.inner);
        let c = guard.collections.get_mut(resource).expect("known resource");
        c.watchers.retain(|w| w.tx.send(line.clone()).is_ok());
    }

    /// Adds objects with no watch event and no history, as if they had been there long
    /// before any client came (fast for tens of thousands of objects).
    pub fn preload(&self, resource: &str, objects: impl IntoIterator<Item = Value>) {
        self.with(resource, |c, rv| {
            for mut object in objects {
                object["apiVersion"] = json!(c.api_version);
                object["kind"] = json!(c.kind);
                object["metadata"]["resourceVersion"] = json!(rv.to_string());
                c.objects.insert(key(&object), object);
            }
        });
    }

    /// Replaces the whole collection without telling any watcher (as if the events were
    /// compacted away), then ends the open watches; the next watch answers ERROR 410 Gone,
    /// so only a re-list can see the new state.
    pub fn replace_and_expire(&self, resource: &str, objects: Vec<Value>) {
        self.with(resource, |c, rv| {
            c.objects.clear();
            for mut object in objects {
                object["apiVersion"] = json!(c.api_version);
                object["kind"] = json!(c.kind);
                object["metadata"]["resourceVersion"] = json!(rv.to_string());
                c.objects.insert(key(&object), object);
            }
            c.history.clear();
            c.gone_next_watch = true;
            c.watchers.clear();
        });
    }

    /// An expiry set by [`FakeApi::replace_and_expire`] that no watch has been told yet.
    pub fn expiry_pending(&self, resource: &str) -> bool {
        lock(&self.inner).collections.get(resource).expect("known resource").gone_next_watch
    }

    /// While set, lists of `resource` answer 500.
    pub fn fail_lists(&self, resource: &str, fail: bool) {
        lock(&self.inner).collections.get_mut(resource).expect("known resource").fail_lists = fail;
    }

    /// While set, every list of `resource` is answered `delay` late, so that lists overlap.
    pub fn slow_lists(&self, resource: &str, delay: Option<Duration>) {
        lock(&self.inner).collections.get_mut(resource).expect("known resource").list_delay = delay;
    }

    /// The most lists of `resource` that were waiting at once under [`FakeApi::slow_lists`].
    pub fn most_lists_in_flight(&self, resource: &str) -> usize {
        lock(&self.inner).collections.get(resource).expect("known resource").most_lists_in_flight
    }

    /// Requests answered so far by HTTP version (`"HTTP/1.1"`, `"HTTP/2.0"`).
    pub fn http_versions(&self) -> BTreeMap<String, usize> {
        lock(&self.inner).http_versions.clone()
    }

    /// TCP connections accepted so far (counted over TLS only).
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    pub fn requests(&self) -> Vec<Request> {
        lock(&self.inner).requests.clone()
    }

    pub fn open_watches(&self, resource: &str) -> usize {
        let mut guard = lock(&self.inner);
        let c = guard.collections.get_mut(resource).expect("known resource");
        c.watchers.retain(|w| !w.tx.is_closed());
        c.watchers.len()
    }

    /// From now on, a TokenReview of `token` authenticates `username` (in `groups`).
    pub fn accept_token(&self, token: &str, username: &str, groups: &[&str]) {
        let user = json!({"username": username, "uid": format!("uid-{username}"), "groups": groups});
        lock(&self.inner).tokens.insert(token.to_owned(), user);
    }

    /// From now on, `username` may `get` the non-resource URL `/metrics`.
    pub fn allow_metrics(&self, username: &str) {
        lock(&self.inner).metrics_readers.push(username.to_owned());
    }

    /// The TokenReviews and SubjectAccessReviews asked so far (the request bodies).
    pub fn reviews(&self) -> Vec<Value> {
        lock(&self.inner).reviews.clone()
    }

    /// The Events created so far (the request bodies).
    pub fn events(&self) -> Vec<Value> {
        lock(&self.inner).events.clone()
    }
}

impl Collection {
    fn send(&mut self, rv: u64, event: Value) {
        self.history.push((rv, event.clone()));
        self.watchers.retain(|w| !w.scope.includes(&event["object"]) || w.tx.send(line(&event)).is_ok());
    }
}

/// Polls `check` until it returns `Some`, failing the test after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

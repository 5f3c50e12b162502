//! The fake API's HTTP side: lists and watches of a collection, one Node, Events created,
//! and the token and access reviews.

use super::*;

pub(super) fn collection_route(resource: &'static str) -> MethodRouter<Shared> {
    get(move |State(inner): State<Shared>, Query(params): Query<HashMap<String, String>>| async move {
        delay_list(&inner, resource, &params).await;
        collection(&inner, resource, None, params)
    })
}

pub(super) fn namespaced_route(resource: &'static str) -> MethodRouter<Shared> {
    get(
        move |State(inner): State<Shared>,
              Path(namespace): Path<String>,
              Query(params): Query<HashMap<String, String>>| async move {
            delay_list(&inner, resource, &params).await;
            collection(&inner, resource, Some(namespace), params)
        },
    )
}

/// Holds a list of `resource` for its [`FakeApi::slow_lists`] delay, counted in flight.
async fn delay_list(inner: &Shared, resource: &str, params: &HashMap<String, String>) {
    let is_watch = matches!(params.get("watch").map(String::as_str), Some("true" | "1"));
    let delay = {
        let mut guard = lock(inner);
        let c = guard.collections.get_mut(resource).expect("known resource");
        let Some(delay) = c.list_delay.filter(|_| !is_watch) else { return };
        c.lists_in_flight += 1;
        c.most_lists_in_flight = c.most_lists_in_flight.max(c.lists_in_flight);
        delay
    };
    tokio::time::sleep(delay).await;
    lock(inner).collections.get_mut(resource).expect("known resource").lists_in_flight -= 1;
}

fn collection(
    inner: &Shared,
    resource: &'static str,
    namespace: Option<String>,
    params: HashMap<String, String>,
) -> Response {
    let mut guard = lock(inner);
    let request = Request { resource: resource.to_owned(), namespace: namespace.clone(), params: params.clone() };
    let watch = request.is_watch();
    guard.requests.push(request);
    if guard.stopping {
        // A client re-watching the moment its watch ended would otherwise open a stream that
        // holds the graceful shutdown (and the server, past its abort) up for good.
        return (StatusCode::SERVICE_UNAVAILABLE, Json(status(503, "ServiceUnavailable", "stopping"))).into_response();
    }
    let current_rv = guard.resource_version;
    let c = guard.collections.get_mut(resource).expect("known resource");
    let scope = Scope { namespace, selector: params.get("fieldSelector").cloned() };
    if !watch {
        if c.fail_lists {
            return (StatusCode::INTERNAL_SERVER_ERROR, Json(status(500, "InternalError", "lists fail")))
                .into_response();
        }
        let items: Vec<Value> = match scope.only_key(resource) {
            Some(key) => c.objects.get(&key).filter(|o| scope.includes(o)).cloned().into_iter().collect(),
            None => c.objects.values().filter(|o| scope.includes(o)).cloned().collect(),
        };
        let list = json!({"apiVersion": c.api_version, "kind": format!("{}List", c.kind),
            "metadata": {"resourceVersion": current_rv.to_string()}, "items": items});
        return Json(list).into_response();
    }
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    if std::mem::take(&mut c.gone_next_watch) {
        let _ = tx.send(line(&json!({"type": "ERROR",
            "object": status(410, "Expired", "too old resource version")})));
        drop(tx);
    } else {
        let from: u64 = params.get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
        if from > 0 {
            for (rv, event) in &c.history {
                if *rv > from && scope.includes(&event["object"]) {
                    let _ = tx.send(line(event));
                }
            }
        }
        c.watchers.push(Watcher { scope, tx });
    }
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|bytes| (Ok::<Bytes, Infallible>(bytes), rx))
    });
    ([(header::CONTENT_TYPE, "application/json")], Body::from_stream(stream)).into_response()
}

pub(super) async fn get_node(State(inner): State<Shared>, Path(name): Path<String>) -> Response {
    let mut guard = lock(&inner);
    guard.requests.push(Request { resource: format!("{NODES}/{name}"), namespace: None, params: HashMap::new() });
    match guard.collections.get(NODES).and_then(|c| c.objects.get(&name)) {
        Some(node) => Json(node.clone()).into_response(),
        None => (StatusCode::NOT_FOUND, Json(status(404, "NotFound", &format!("nodes \"{name}\" not found"))))
            .into_response(),
    }
}

pub(super) async fn create_event(
    State(inner): State<Shared>,
    Path(namespace): Path<String>,
    Json(event): Json<Value>,
) -> impl IntoResponse {
    let mut guard = lock(&inner);
    guard.requests.push(Request { resource: format!("events/{namespace}"), namespace: None, params: HashMap::new() });
    guard.events.push(event.clone());
    (StatusCode::CREATED, Json(event))
}

pub(super) async fn token_review(State(inner): State<Shared>, Json(mut review): Json<Value>) -> impl IntoResponse {
    let mut guard = lock(&inner);
    guard.reviews.push(review.clone());
    let user = review["spec"]["token"].as_str().and_then(|t| guard.tokens.get(t).cloned());
    review["status"] = match user {
        Some(user) => json!({"authenticated": true, "user": user}),
        None => json!({"authenticated": false, "error": "invalid bearer token"}),
    };
    (StatusCode::CREATED, Json(review))
}

/// Allowed: `get` on the non-resource URL `/metrics` by a declared reader; nothing else.
pub(super) async fn access_review(State(inner): State<Shared>, Json(mut review): Json<Value>) -> impl IntoResponse {
    let mut guard = lock(&inner);
    guard.reviews.push(review.clone());
    let spec = &review["spec"];
    let wants_metrics = spec["nonResourceAttributes"] == json!({"path": "/metrics", "verb": "get"});
    let reader = spec["user"].as_str().is_some_and(|u| guard.metrics_readers.iter().any(|r| r == u));
    review["status"] = json!({"allowed": wants_metrics && reader});
    (StatusCode::CREATED, Json(review))
}

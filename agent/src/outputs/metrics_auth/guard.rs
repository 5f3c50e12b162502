//! The middleware in front of the secure metrics router: every path but kubelet's probes
//! needs a decision of [`Authorizer`]; a refusal is answered as JSON with its status and
//! logged (once per token and decision while it is cached).

use std::{net::SocketAddr, sync::Arc};

use axum::{
    Json, Router,
    extract::{ConnectInfo, Request, State},
    http::header,
    middleware::Next,
    response::{IntoResponse, Response},
};
use serde_json::json;
use tracing::{debug, warn};

use super::decision::{Authorizer, Decision, Reviews};
use crate::outputs::served_state::API_VERSION;

/// Open to anyone who reaches the port: kubelet's probes send no token, and the answers
/// say nothing about the node's pods or volumes.
const OPEN_PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// `router` with every path except [`OPEN_PATHS`] behind `authorizer`.
pub fn protect<R: Reviews>(router: Router, authorizer: Arc<Authorizer<R>>) -> Router {
    router.layer(axum::middleware::from_fn_with_state(authorizer, guard::<R>))
}

async fn guard<R: Reviews>(State(authorizer): State<Arc<Authorizer<R>>>, request: Request, next: Next) -> Response {
    if OPEN_PATHS.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.to_string());
    let peer = peer.as_deref().unwrap_or("unknown address");
    let (decision, fresh) = authorizer.decide(request.headers().get(header::AUTHORIZATION)).await;
    if let Decision::Allowed { .. } = decision {
        if fresh {
            debug!("metrics: {peer}: {}", decision.explain());
        }
        return next.run(request).await;
    }
    if fresh {
        warn!(
            "metrics: refused {} {} from {peer} ({}): {}",
            request.method(),
            request.uri().path(),
            decision.status().as_u16(),
            decision.explain()
        );
    }
    let status = decision.status();
    let body = json!({"apiVersion": API_VERSION, "error": decision.explain(), "status": status.as_u16()});
    let mut response = (status, Json(body)).into_response();
    if status == axum::http::StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    }
    response
}

//! `/metrics` over HTTPS for Kubernetes callers only (`--metrics-secure`), as
//! kube-rbac-proxy and controller-runtime's secure metrics serve it: the caller's bearer
//! token is authenticated with a TokenReview and authorized with a SubjectAccessReview
//! (non-resource URL `/metrics`, verb `get`); no token or a token the API server does not
//! accept is 401, a caller without the permission 403. `/healthz` and `/readyz` stay open
//! to kubelet's probes (which send no token) on the same TLS listener.
//!
//! - [`decision`]: the decision for one request, and the short-lived cache of decisions;
//! - [`reviews`]: the two reviews through the agent's kube client;
//! - [`guard`]: the axum middleware that answers with the decision, logs and counts it;
//! - [`tls`]: the certificate (files, or self-signed at start) and the TLS listener;
//! - [`access_metrics`]: `volguard_metrics_requests_total` by decision.

pub mod access_metrics;
pub mod decision;
pub mod guard;
pub mod reviews;
pub mod tls;

pub use access_metrics::AccessMetrics;

//! What the agent tells the world: Prometheus metrics (over HTTPS for Kubernetes callers
//! only, with `--metrics-secure`), the local debug API and the state
//! it serves, Kubernetes Events for conflicts, and the one-line rendering of events and
//! conflicts that `volguard trace` prints and the agent logs.

pub mod events;
pub mod http;
pub mod kernel_metrics;
pub mod metrics;
pub mod metrics_auth;
pub mod node_open_metrics;
pub mod notification_metrics;
pub mod render;
pub mod served_state;

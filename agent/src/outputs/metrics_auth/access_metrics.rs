//! What the secure `/metrics` decided, counted: `volguard_metrics_requests_total` by
//! `decision` (allowed, no_token, invalid_token, forbidden, review_failed). Registered
//! with every other metric, each series from the start: all read 0 on an agent serving
//! plain HTTP.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};

/// Every `Decision::label`.
const DECISIONS: [&str; 5] = ["allowed", "no_token", "invalid_token", "forbidden", "review_failed"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    decision: String,
}

#[derive(Clone)]
pub struct AccessMetrics {
    requests: Family<DecisionLabels, Counter>,
}

impl AccessMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let requests = Family::<DecisionLabels, Counter>::default();
        registry.register(
            "volguard_metrics_requests",
            "Requests for /metrics over HTTPS (--metrics-secure), by decision: allowed, no_token, invalid_token \
             (401), forbidden (403), review_failed (503: the API server could not be asked)",
            requests.clone(),
        );
        for decision in DECISIONS {
            let _series = requests.get_or_create(&DecisionLabels { decision: decision.into() });
        }
        Self { requests }
    }

    /// Counts one request under its decision's label (`Decision::label`).
    pub fn count(&self, label: &'static str) {
        self.requests.get_or_create(&DecisionLabels { decision: label.into() }).inc();
    }

    /// The count of one decision label (tests).
    pub fn get(&self, label: &str) -> u64 {
        self.requests.get_or_create(&DecisionLabels { decision: label.into() }).get()
    }
}

//! Who may read `/metrics`: the bearer token of the request, reviewed by the API server
//! ([`Reviews`]), and the decision kept a short while per token ([`Authorizer`]).
//!
//! The cache is keyed by the token's SHA-256 (the token itself is not kept): an allowed
//! caller is not reviewed again for [`ALLOWED_TTL`], a refused one for [`REFUSED_TTL`];
//! a review that failed is not kept. So a token revoked, or a binding removed, still reads
//! the metrics for up to [`ALLOWED_TTL`] (kube-rbac-proxy keeps its decisions 5 minutes).

use std::{
    collections::HashMap,
    future::Future,
    sync::Mutex,
    time::{Duration, Instant},
};

use axum::http::{HeaderValue, StatusCode};
use k8s_openapi::api::authentication::v1::UserInfo;
use sha2::{Digest, Sha256};

use super::access_metrics::AccessMetrics;

/// How long an allowed caller is not reviewed again.
pub const ALLOWED_TTL: Duration = Duration::from_secs(60);
/// How long a refused token (invalid, or not authorized) is not reviewed again.
pub const REFUSED_TTL: Duration = Duration::from_secs(10);
/// At most this many tokens remembered; past it, the expired go, then all.
const CACHE_ENTRIES: usize = 1024;

/// The path and verb a caller must be allowed (`nonResourceURLs`, `verbs` of a ClusterRole).
pub const METRICS_PATH: &str = "/metrics";
pub const METRICS_VERB: &str = "get";

/// The API server's answers about a token and a user.
pub trait Reviews: Send + Sync + 'static {
    /// TokenReview: the user the token belongs to, or `None` when the API server does not
    /// accept it (unknown, expired, wrong audience).
    fn authenticate(&self, token: &str) -> impl Future<Output = Result<Option<UserInfo>, String>> + Send;
    /// SubjectAccessReview: whether `user` may `get` the non-resource URL `/metrics`.
    fn may_read_metrics(&self, user: &UserInfo) -> impl Future<Output = Result<bool, String>> + Send;
}

/// What one request gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allowed {
        user: String,
    },
    /// No `Authorization: Bearer` header.
    NoToken,
    /// The API server did not authenticate the token.
    InvalidToken,
    /// An authenticated user without `get` on `/metrics`.
    Forbidden {
        user: String,
    },
    /// The API server could not be asked (nothing is cached).
    ReviewFailed {
        reason: String,
    },
}

impl Decision {
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Allowed { .. } => StatusCode::OK,
            Self::NoToken | Self::InvalidToken => StatusCode::UNAUTHORIZED,
            Self::Forbidden { .. } => StatusCode::FORBIDDEN,
            Self::ReviewFailed { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The `decision` label of `volguard_metrics_requests_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Allowed { .. } => "allowed",
            Self::NoToken => "no_token",
            Self::InvalidToken => "invalid_token",
            Self::Forbidden { .. } => "forbidden",
            Self::ReviewFailed { .. } => "review_failed",
        }
    }

    /// The sentence for the log and the answer's body.
    pub fn explain(&self) -> String {
        match self {
            Self::Allowed { user } => format!("{user} may get {METRICS_PATH}"),
            Self::NoToken => "no bearer token (Authorization: Bearer <token>)".into(),
            Self::InvalidToken => "the API server did not authenticate the bearer token (TokenReview)".into(),
            Self::Forbidden { user } => {
                format!("{user} may not get {METRICS_PATH} (SubjectAccessReview; bind it to the metrics ClusterRole)")
            }
            Self::ReviewFailed { reason } => format!("could not review the token: {reason}"),
        }
    }

    fn ttl(&self) -> Option<Duration> {
        match self {
            Self::Allowed { .. } => Some(ALLOWED_TTL),
            Self::InvalidToken | Self::Forbidden { .. } => Some(REFUSED_TTL),
            Self::NoToken | Self::ReviewFailed { .. } => None,
        }
    }
}

/// Decides requests with `reviews`, remembering decisions per token; counts each.
pub struct Authorizer<R> {
    reviews: R,
    cache: Mutex<HashMap<[u8; 32], (Decision, Instant)>>,
    counts: AccessMetrics,
}

impl<R: Reviews> Authorizer<R> {
    pub fn new(reviews: R, counts: AccessMetrics) -> Self {
        Self { reviews, cache: Mutex::default(), counts }
    }

    /// The decision for a request with this `Authorization` header, and whether it was
    /// made now (false: from the cache). Counted either way.
    pub async fn decide(&self, authorization: Option<&HeaderValue>) -> (Decision, bool) {
        let (decision, fresh) = match bearer(authorization) {
            None => (Decision::NoToken, true),
            Some(token) => self.decide_token(token).await,
        };
        self.counts.count(decision.label());
        (decision, fresh)
    }

    async fn decide_token(&self, token: &str) -> (Decision, bool) {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        if let Some((decision, until)) = self.lock().get(&key)
            && *until > now
        {
            return (decision.clone(), false);
        }
        let decision = self.review(token).await;
        if let Some(ttl) = decision.ttl() {
            let mut cache = self.lock();
            if cache.len() >= CACHE_ENTRIES {
                cache.retain(|_, (_, until)| *until > now);
                if cache.len() >= CACHE_ENTRIES {
                    cache.clear();
                }
            }
            cache.insert(key, (decision.clone(), now + ttl));
        }
        (decision, true)
    }

    async fn review(&self, token: &str) -> Decision {
        let user = match self.reviews.authenticate(token).await {
            Ok(Some(user)) => user,
            Ok(None) => return Decision::InvalidToken,
            Err(reason) => return Decision::ReviewFailed { reason: format!("TokenReview: {reason}") },
        };
        let name = user.username.clone().unwrap_or_default();
        match self.reviews.may_read_metrics(&user).await {
            Ok(true) => Decision::Allowed { user: name },
            Ok(false) => Decision::Forbidden { user: name },
            Err(reason) => Decision::ReviewFailed { reason: format!("SubjectAccessReview: {reason}") },
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], (Decision, Instant)>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The token of `Authorization: Bearer <token>` (the scheme case-insensitive), if any.
fn bearer(header: Option<&HeaderValue>) -> Option<&str> {
    let value = header?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use prometheus_client::registry::Registry;

    use super::*;

    /// The API server's answers for three tokens: `good` (alice, bound), `unbound` (bob,
    /// not bound), `broken` (the API server unreachable); any other token is unknown.
    #[derive(Default)]
    struct FakeReviews {
        token_reviews: AtomicUsize,
        access_reviews: AtomicUsize,
    }

    impl Reviews for FakeReviews {
        async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, String> {
            self.token_reviews.fetch_add(1, Ordering::Relaxed);
            let user = |name: &str| UserInfo { username: Some(name.into()), ..UserInfo::default() };
            match token {
                "good" => Ok(Some(user("alice"))),
                "unbound" => Ok(Some(user("bob"))),
                "broken" => Err("connection refused".into()),
                _ => Ok(None),
            }
        }
        async fn may_read_metrics(&self, user: &UserInfo) -> Result<bool, String> {
            self.access_reviews.fetch_add(1, Ordering::Relaxed);
            Ok(user.username.as_deref() == Some("alice"))
        }
    }

    fn authorizer() -> Authorizer<FakeReviews> {
        Authorizer::new(FakeReviews::default(), AccessMetrics::register(&mut Registry::default()))
    }

    fn header(text: &str) -> HeaderValue {
        HeaderValue::from_str(text).unwrap()
    }

    #[tokio::test]
    async fn each_kind_of_caller_gets_its_answer_and_is_counted() {
        let auth = authorizer();
        for (authorization, want, status) in [
            (None, "no_token", 401),
            (Some("Basic dXNlcjpwdw=="), "no_token", 401),
            (Some("Bearer "), "no_token", 401),
            (Some("Bearer nobody-knows-me"), "invalid_token", 401),
            (Some("Bearer unbound"), "forbidden", 403),
            (Some("bearer good"), "allowed", 200),
            (Some("Bearer broken"), "review_failed", 503),
        ] {
            let (decision, _) = auth.decide(authorization.map(header).as_ref()).await;
            assert_eq!((decision.label(), decision.status().as_u16()), (want, status), "{authorization:?}");
        }
        let counted =
            ["allowed", "no_token", "invalid_token", "forbidden", "review_failed"].map(|l| auth.counts.get(l));
        assert_eq!(counted, [1, 3, 1, 1, 1]);
        let (decision, _) = auth.decide(Some(&header("Bearer unbound"))).await;
        assert!(decision.explain().contains("bob may not get /metrics"), "{}", decision.explain());
    }

    #[tokio::test]
    async fn decisions_are_kept_per_token_but_failures_are_not() {
        let auth = authorizer();
        for _ in 0..3 {
            assert_eq!(auth.decide(Some(&header("Bearer good"))).await.0.label(), "allowed");
            assert_eq!(auth.decide(Some(&header("Bearer unbound"))).await.0.label(), "forbidden");
            assert_eq!(auth.decide(Some(&header("Bearer nope"))).await.0.label(), "invalid_token");
            assert_eq!(auth.decide(Some(&header("Bearer broken"))).await.0.label(), "review_failed");
        }
        let reviews = &auth.reviews;
        // good, unbound, nope once each; broken every time.
        assert_eq!(reviews.token_reviews.load(Ordering::Relaxed), 3 + 3);
        assert_eq!(reviews.access_reviews.load(Ordering::Relaxed), 2, "alice and bob, once each");
        assert_eq!(auth.counts.get("allowed"), 3, "a cached decision is counted too");
        let (_, fresh) = auth.decide(Some(&header("Bearer good"))).await;
        assert!(!fresh);
    }

    #[tokio::test]
    async fn an_expired_decision_is_reviewed_again() {
        let auth = authorizer();
        auth.decide(Some(&header("Bearer good"))).await;
        for (_, until) in auth.lock().values_mut() {
            *until = Instant::now();
        }
        let (decision, fresh) = auth.decide(Some(&header("Bearer good"))).await;
        assert_eq!((decision.label(), fresh), ("allowed", true));
        assert_eq!(auth.reviews.token_reviews.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn the_cache_stays_bounded() {
        let auth = authorizer();
        for i in 0..CACHE_ENTRIES + 10 {
            auth.decide(Some(&header(&format!("Bearer t{i}")))).await;
        }
        assert!(auth.lock().len() <= CACHE_ENTRIES);
    }
}

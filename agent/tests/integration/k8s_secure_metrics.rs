//! `/metrics` over HTTPS behind the token and access reviews (`--metrics-secure`): the
//! agent's listener (`outputs::metrics_auth`) on 127.0.0.1, its reviews asked of the fake
//! API server ([`crate::support::fake_api`]), and every request made with the agent's own
//! client (`cli::client`, ureq) as a scraper would. `cargo xtask e2e` proves the same
//! against a real API server and Prometheus.

use std::{net::SocketAddr, path::Path, sync::Arc, time::Duration};

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use serde_json::json;
use tokio::net::TcpListener;
use volguard::{
    cli::client::{Client, GetError, Response, Trust},
    outputs::{
        http,
        metrics_auth::{
            decision::Authorizer,
            guard,
            reviews::KubeReviews,
            tls::{self, Certificate},
        },
        served_state::ServedState,
    },
};

use crate::support::fake_api::FakeApi;

const TIMEOUT: Duration = Duration::from_secs(10);

/// The secure metrics listener on 127.0.0.1, reviewing with `fake`.
async fn serve(fake: &FakeApi, certificate: &Certificate) -> (SocketAddr, Arc<ServedState>) {
    let shared = Arc::new(ServedState::new(json!({})));
    let config = tls::server_config(certificate).expect("TLS configuration");
    let authorizer = Arc::new(Authorizer::new(KubeReviews::new(fake.client()), shared.metrics.access.clone()));
    let router = guard::protect(http::metrics_router(shared.clone()), authorizer);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
    let address = listener.local_addr().expect("local address");
    tokio::spawn(tls::serve(listener, router, config));
    (address, shared)
}

/// A CA (DER) and, in `dir`, a serving certificate for 127.0.0.1 it signed and its key (PEM).
fn ca_signed_files(dir: &Path) -> (Vec<u8>, Certificate) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap().signed_by(&key, &ca, &ca_key).unwrap();
    let (cert_file, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
    // The chain as a Secret's tls.crt holds it: leaf, then the CA.
    std::fs::write(&cert_file, cert.pem() + &ca.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    (ca.der().to_vec(), Certificate::Files { cert: cert_file, key: key_file })
}

/// GET `url` with the agent's client, off the runtime (it blocks).
async fn get(url: String, trust: Option<Vec<u8>>, token: Option<&str>) -> Result<Response, GetError> {
    let token = token.map(str::to_owned);
    tokio::task::spawn_blocking(move || {
        let trust = trust.map_or(Trust::Any, Trust::Certificate);
        Client::https(TIMEOUT, trust).get(&url, token.as_deref())
    })
    .await
    .expect("the GET's thread")
}

#[tokio::test]
async fn only_callers_the_api_server_allows_read_the_metrics_over_https() {
    let fake = FakeApi::start().await;
    fake.accept_token("prometheus-token", "system:serviceaccount:monitoring:prometheus", &["system:serviceaccounts"]);
    fake.accept_token("other-token", "system:serviceaccount:default:other", &["system:serviceaccounts"]);
    fake.allow_metrics("system:serviceaccount:monitoring:prometheus");
    let dir = tempfile::tempdir().unwrap();
    let (ca, certificate) = ca_signed_files(dir.path());
    let (address, shared) = serve(&fake, &certificate).await;
    let url = |path: &str| format!("https://{address}{path}");
    let answer = |path: &str, token: Option<&'static str>| get(url(path), Some(ca.clone()), token);

    for (token, want, says) in [
        (None, 401, "no bearer token"),
        (Some("made-up"), 401, "did not authenticate"),
        (Some("other-token"), 403, "system:serviceaccount:default:other may not get /metrics"),
    ] {
        let response = answer("/metrics", token).await.expect("an answer");
        assert_eq!(response.status, want, "{token:?}: {}", response.body);
        assert!(response.body.contains(says), "{token:?}: {}", response.body);
        assert!(!response.body.contains("volguard_build_info"), "no metrics for {token:?}");
    }
    let allowed = answer("/metrics", Some("prometheus-token")).await.expect("an answer");
    assert_eq!(allowed.status, 200, "{}", allowed.body);
    assert!(allowed.body.contains("volguard_build_info"));
    assert!(allowed.body.contains("volguard_metrics_requests_total{decision=\"forbidden\"} 1"), "{}", allowed.body);
    assert!(allowed.body.contains("volguard_metrics_requests_total{decision=\"no_token\"} 1"));
    assert!(allowed.body.contains("volguard_metrics_requests_total{decision=\"invalid_token\"} 1"));
    assert_eq!(answer("/healthz", None).await.expect("an answer").status, 200, "kubelet's probes need no token");
    assert_eq!(answer("/nothing", None).await.expect("an answer").status, 401, "every other path is guarded");

    // What the API server was asked: the token, then the token's user for get /metrics.
    let reviews = fake.reviews();
    let access = reviews
        .iter()
        .find(|r| {
            r["kind"] == "SubjectAccessReview" && r["spec"]["user"] == "system:serviceaccount:monitoring:prometheus"
        })
        .expect("a SubjectAccessReview for prometheus");
    assert_eq!(access["spec"]["nonResourceAttributes"], json!({"path": "/metrics", "verb": "get"}));
    assert_eq!(access["spec"]["groups"], json!(["system:serviceaccounts"]));
    assert_eq!(access["spec"]["uid"], "uid-system:serviceaccount:monitoring:prometheus");
    assert_eq!(access["apiVersion"], "authorization.k8s.io/v1");
    let token_reviews = reviews.iter().filter(|r| r["kind"] == "TokenReview").count();
    assert_eq!(token_reviews, 3, "made-up, other-token, prometheus-token: once each");

    // Cached: the same callers again ask the API server nothing more.
    answer("/metrics", Some("prometheus-token")).await.expect("an answer");
    answer("/metrics", Some("other-token")).await.expect("an answer");
    assert_eq!(fake.reviews().len(), reviews.len());
    assert_eq!(shared.metrics.access.get("allowed"), 2);
    assert_eq!(shared.metrics.access.get("forbidden"), 2);

    // Plain HTTP on the TLS port gets no answer.
    let plain =
        tokio::task::spawn_blocking(move || Client::plain(TIMEOUT).get(&format!("http://{address}/metrics"), None));
    assert!(plain.await.unwrap().is_err());
}

#[tokio::test]
async fn without_files_the_certificate_is_self_signed() {
    let fake = FakeApi::start().await;
    let (address, _) = serve(&fake, &Certificate::SelfSigned { names: vec!["localhost".into()] }).await;
    let url = format!("https://{address}/healthz");
    assert_eq!(get(url.clone(), None, None).await.expect("an answer").status, 200, "trusting any certificate");
    let (other_ca, _) = ca_signed_files(tempfile::tempdir().unwrap().path());
    let refused = get(url, Some(other_ca), None).await;
    assert!(
        matches!(&refused, Err(GetError::Protocol { message, .. }) if message.contains("certificate")),
        "{refused:?}"
    );
}

#[tokio::test]
async fn an_api_server_that_cannot_be_asked_is_503_and_not_remembered() {
    let mut fake = FakeApi::start().await;
    fake.accept_token("t", "alice", &[]);
    fake.allow_metrics("alice");
    let (address, shared) = serve(&fake, &Certificate::SelfSigned { names: vec!["localhost".into()] }).await;
    let url = format!("https://{address}/metrics");
    fake.stop().await;
    let response = get(url.clone(), None, Some("t")).await.expect("an answer");
    assert_eq!(response.status, 503, "{}", response.body);
    assert!(response.body.contains("could not review the token"), "{}", response.body);
    assert_eq!(shared.metrics.access.get("review_failed"), 1);
    fake.restart().await;
    assert_eq!(get(url, None, Some("t")).await.expect("an answer").status, 200, "reviewed again, not cached");
}

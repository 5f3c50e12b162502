//! The agent's kube client, speaking HTTP/2 to the API server.
//!
//! kube's default client speaks HTTP/1.1 only, so every open watch holds its own TCP
//! connection. The agent follows each PVC and PV its pods use with its own watch
//! ([`super::follow`]): on HTTP/1.1 that is hundreds of connections per node, times
//! thousands of nodes. Over TLS this client offers ALPN `h2` (then `http/1.1`), so all of
//! the agent's requests share one multiplexed connection; a plain `http://` server (the
//! tests' fake) is spoken to in HTTP/1.1.
//!
//! The API server allows 1000 concurrent streams per connection by default
//! (k8s.io/apiserver, `HTTP2MaxStreamsPerConnection`). Beyond that no second connection
//! is opened: further requests wait on this one (h2 queues them) until a stream ends, so
//! a node using more than about 495 PVCs (3 watches, plus 2 per PVC) would see some
//! objects listed only when another watch ends (kube's watches end every 290 s at most).
//! kubelet's default of 110 pods per node stays far below.
//!
//! The agent makes no exec, attach or WebSocket calls, which need HTTP/1.1 upgrades.

use std::time::Duration;

use hyper_util::{
    client::legacy::{Client as HyperClient, connect::HttpConnector},
    rt::{TokioExecutor, TokioTimer},
};
use kube::{
    Client, Config,
    client::{Body, ConfigExt, retry::RetryPolicy},
};
use tower::{BoxError, ServiceBuilder, retry::RetryLayer};

/// How often an HTTP/2 connection is pinged while requests are open, and how long a ping
/// may go unanswered before the connection (and every watch on it) is given up: client-go's
/// HTTP/2 health check (ReadIdleTimeout 30 s, PingTimeout 15 s).
const PING_INTERVAL: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("the Kubernetes client's TLS configuration: {0}")]
    Tls(#[source] kube::Error),
    #[error("the Kubernetes client's authentication: {0}")]
    Auth(#[source] kube::Error),
    #[error("the Kubernetes client's extra headers: {0}")]
    Headers(#[source] kube::Error),
    #[error("TLS server name {name:?} is not a valid DNS name or IP address")]
    ServerName { name: String },
    #[error("a proxy ({proxy}) is configured, but the agent talks to the API server directly")]
    Proxy { proxy: String },
}

/// A kube [`Client`] for `config` with kube's own layers (base URI, authentication,
/// extra headers, retries of 429/503/504 when the config asks), over HTTP/2 where the
/// server offers it. A proxy in `config` is refused, as kube's client built without its
/// proxy features does.
pub fn http2_client(config: Config) -> Result<Client, ClientError> {
    if let Some(proxy) = &config.proxy_url {
        return Err(ClientError::Proxy { proxy: proxy.to_string() });
    }
    let mut tls = config.rustls_client_config().map_err(ClientError::Tls)?;
    // hyper-rustls sets the ALPN protocols itself and refuses a config that has any.
    tls.alpn_protocols.clear();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http();
    let builder = match &config.tls_server_name {
        Some(name) => {
            let server_name = name.clone().try_into().map_err(|_| ClientError::ServerName { name: name.clone() })?;
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(server_name))
        }
        None => builder,
    };
    let connector = builder.enable_http1().enable_http2().wrap_connector(http);
    let hyper: HyperClient<_, Body> = HyperClient::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(PING_INTERVAL)
        .http2_keep_alive_timeout(PING_TIMEOUT)
        .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.default_retry.then(|| RetryLayer::new(RetryPolicy::server_retry())))
        .option_layer(config.auth_layer().map_err(ClientError::Auth)?)
        .layer(config.extra_headers_layer().map_err(ClientError::Headers)?)
        .map_err(BoxError::from)
        .service(hyper);
    Ok(Client::new(service, config.default_namespace))
}

/// How long [`open_shared_connection`] waits before the agent goes on regardless.
const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens the connection the agent's requests then share, with one request (`GET
/// /version`, readable by every identity) before any other: the client learns that the
/// server speaks HTTP/2 only once a connection has negotiated it (ALPN), so requests
/// started together on a cold client would each open a connection of their own. A failure
/// is only logged: the watches that follow retry and report it.
pub async fn open_shared_connection(client: &Client) {
    match tokio::time::timeout(FIRST_REQUEST_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(version)) => tracing::debug!(version = %version.git_version, "API server answered"),
        Ok(Err(e)) => tracing::debug!("API server version: {e}"),
        Err(_) => tracing::debug!("API server version: no answer in {FIRST_REQUEST_TIMEOUT:?}"),
    }
}

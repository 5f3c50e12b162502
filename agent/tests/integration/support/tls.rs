//! TLS with HTTP/2 for the fake API server, as a real API server serves: a CA and a
//! certificate for 127.0.0.1 made on the spot, ALPN `h2` then `http/1.1`, and a
//! connection served in whichever protocol the client chose.

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use axum::Router;
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
    service::TowerToHyperService,
};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::{net::TcpListener, task::JoinSet};
use tokio_rustls::TlsAcceptor;

/// As a real API server (k8s.io/apiserver `HTTP2MaxStreamsPerConnection`); hyper's default
/// is 200, which would hold back lists behind a node's hundreds of open watches.
const MAX_STREAMS_PER_CONNECTION: u32 = 1000;

/// The server's TLS identity and the CA a client must trust.
#[derive(Clone)]
pub struct TlsIdentity {
    pub ca_pem: String,
    pub ca_der: Vec<u8>,
    config: Arc<rustls::ServerConfig>,
}

impl TlsIdentity {
    /// A fresh CA and a serving certificate for 127.0.0.1 signed by it.
    pub fn for_loopback() -> Self {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).expect("self-signed CA");
        let key = KeyPair::generate().expect("server key");
        let params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("server parameters");
        let cert = params.signed_by(&key, &ca, &ca_key).expect("server certificate");

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .expect("server TLS config");
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Self { ca_pem: ca.pem(), ca_der: ca.der().to_vec(), config: Arc::new(config) }
    }
}

/// Serves `router` on `listener` over TLS until `stop` completes, then ends every
/// connection. `connections` counts the TCP connections accepted.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    identity: TlsIdentity,
    connections: Arc<AtomicUsize>,
    stop: impl Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(identity.config);
    let mut open = JoinSet::new();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => {
                let Ok((tcp, _)) = accepted else { continue };
                connections.fetch_add(1, Ordering::Relaxed);
                let (acceptor, service) = (acceptor.clone(), TowerToHyperService::new(router.clone()));
                open.spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let mut builder = auto::Builder::new(TokioExecutor::new());
                    builder.http2().max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
                    let _ = builder.serve_connection(TokioIo::new(tls), service).await;
                });
            }
        }
    }
    open.abort_all();
}

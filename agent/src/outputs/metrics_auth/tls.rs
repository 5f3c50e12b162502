//! The secure metrics listener's TLS: the certificate and key from PEM files (the chart
//! mounts the user's Secret), else a self-signed certificate made at start (a scraper
//! then skips verification, as with kube-rbac-proxy's default), and the accept loop that
//! serves each connection in HTTP/1.1 or HTTP/2 as the client chose (ALPN).
//!
//! The files are read once, at start: a renewed Secret takes effect when the agent restarts.

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use axum::{Router, extract::ConnectInfo};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
    service::TowerToHyperService,
};
use rustls::{
    ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, pem::PemObject},
};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;
use tracing::debug;

/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the serving certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Certificate {
    /// PEM files: the chain (leaf first) and its private key (PKCS#8, PKCS#1 or SEC1).
    Files { cert: PathBuf, key: PathBuf },
    /// Made at start, valid for these DNS names or IP addresses.
    SelfSigned { names: Vec<String> },
}

impl Certificate {
    /// For `/debug/config`.
    pub fn describe(&self) -> String {
        match self {
            Self::Files { cert, key } => format!("files {} and {}", cert.display(), key.display()),
            Self::SelfSigned { names } => format!("self-signed for {}", names.join(", ")),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading the metrics certificate {path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("{path} holds no certificate")]
    NoCertificate { path: PathBuf },
    #[error("making a self-signed metrics certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("the metrics certificate and key: {0}")]
    Config(#[from] rustls::Error),
}

/// The server's TLS configuration for `certificate` (ring, TLS 1.2 and 1.3, ALPN h2 then
/// http/1.1).
pub fn server_config(certificate: &Certificate) -> Result<Arc<ServerConfig>, TlsError> {
    let (chain, key) = match certificate {
        Certificate::Files { cert, key } => read_files(cert, key)?,
        Certificate::SelfSigned { names } => {
            let made = rcgen::generate_simple_self_signed(names.clone())?;
            let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(made.key_pair.serialize_der()));
            (vec![made.cert.der().clone()], key)
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn read_files(
    cert: &PathBuf,
    key: &PathBuf,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let read = |path: &PathBuf| {
        let path = path.clone();
        move |e: rustls::pki_types::pem::Error| TlsError::Read { path, message: e.to_string() }
    };
    let chain =
        CertificateDer::pem_file_iter(cert).map_err(read(cert))?.collect::<Result<Vec<_>, _>>().map_err(read(cert))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate { path: cert.clone() });
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(read(key))?;
    Ok((chain, key))
}

/// Serves `router` over TLS on `listener` for the life of the process. Each request
/// carries the peer's address ([`ConnectInfo`]) for the log.
pub async fn serve(listener: TcpListener, router: Router, config: Arc<ServerConfig>) {
    let acceptor = TlsAcceptor::from(config);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: wait rather than spin.
                debug!("metrics: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, router) = (acceptor.clone(), router.clone());
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return debug!("metrics: TLS handshake with {peer}: {e}"),
                Err(_) => return debug!("metrics: TLS handshake with {peer} timed out"),
            };
            let with_peer = router.map_request(move |mut request: axum::http::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
                request
            });
            let service = TowerToHyperService::new(with_peer);
            if let Err(e) = auto::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(tls), service).await
            {
                debug!("metrics: connection from {peer}: {e}");
            }
        });
    }
}

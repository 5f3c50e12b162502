//! The one client of the agent's own HTTP listeners (debug API, metrics), on ureq: a
//! blocking GET read to the end, whatever the status. The CLI views, the demo and the
//! integration tests call it, the tests also over HTTPS with a bearer token; xtask's bench
//! and e2e too, which is why it is a crate of its own (xtask must not link the agent).

use std::{io, net::SocketAddr, sync::Arc, time::Duration};

use ureq::tls::{Certificate, RootCerts, TlsConfig};

/// Answers larger than this are an error (the debug API's largest, 10,000 volumes, is ~2 MB).
const BODY_LIMIT: u64 = 1 << 30;

/// A whole answer: the status code and the body (lossily UTF-8).
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

#[derive(Debug, thiserror::Error)]
pub enum GetError {
    /// Nothing accepted the connection (`source.kind()` tells refused from timed out).
    #[error("connecting to {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: io::Error,
    },
    #[error("talking to {url}: {source}")]
    Io {
        url: String,
        #[source]
        source: io::Error,
    },
    /// The answer was not HTTP, or TLS failed.
    #[error("{url}: {message}")]
    Protocol { url: String, message: String },
}

/// Which server certificates an HTTPS client accepts.
pub enum Trust {
    /// Only one signed by this certificate (DER), or this very certificate.
    Certificate(Vec<u8>),
    /// Any: for the agent's self-signed certificate, as a scraper with
    /// `insecure_skip_verify` does.
    Any,
}

/// A client with its timeouts (connect, and the whole request) and TLS trust.
pub struct Client {
    agent: ureq::Agent,
}

impl Client {
    /// Plain HTTP only.
    pub fn plain(timeout: Duration) -> Self {
        Self::with(timeout, TlsConfig::default())
    }

    /// HTTP and HTTPS, trusting `trust`.
    pub fn https(timeout: Duration, trust: Trust) -> Self {
        let tls = match trust {
            Trust::Certificate(der) => TlsConfig::builder()
                .root_certs(RootCerts::Specific(Arc::new(vec![Certificate::from_der(&der).to_owned()])))
                .build(),
            Trust::Any => TlsConfig::builder().disable_verification(true).build(),
        };
        Self::with(timeout, tls)
    }

    fn with(timeout: Duration, tls: TlsConfig) -> Self {
        let config = ureq::Agent::config_builder()
            .timeout_connect(Some(timeout))
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .tls_config(tls)
            .build();
        Self { agent: config.into() }
    }

    /// `GET url`, with `Authorization: Bearer <token>` when given.
    pub fn get(&self, url: &str, bearer: Option<&str>) -> Result<Response, GetError> {
        let mut request = self.agent.get(url);
        if let Some(token) = bearer {
            request = request.header("Authorization", &format!("Bearer {token}"));
        }
        let error = |e| classify(url, e);
        let response = request.call().map_err(error)?;
        let status = response.status().as_u16();
        let bytes = response.into_body().with_config().limit(BODY_LIMIT).read_to_vec().map_err(error)?;
        Ok(Response { status, body: String::from_utf8_lossy(&bytes).into_owned() })
    }
}

/// `GET path` from `address` in plain HTTP; `timeout` bounds the connect and the request.
pub fn get(address: SocketAddr, path: &str, timeout: Duration) -> Result<Response, GetError> {
    Client::plain(timeout).get(&format!("http://{address}{path}"), None)
}

fn classify(url: &str, error: ureq::Error) -> GetError {
    let url = url.to_owned();
    let connect = |source| GetError::Connect { url: url.clone(), source };
    match error {
        ureq::Error::Io(source)
            if matches!(source.kind(), io::ErrorKind::ConnectionRefused | io::ErrorKind::TimedOut) =>
        {
            connect(source)
        }
        ureq::Error::Timeout(ureq::Timeout::Connect | ureq::Timeout::Resolve) => {
            connect(io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))
        }
        // rustls's refusals (an untrusted certificate) come as InvalidData.
        ureq::Error::Io(source) if source.kind() == io::ErrorKind::InvalidData => {
            GetError::Protocol { url, message: source.to_string() }
        }
        ureq::Error::ConnectionFailed => connect(io::Error::new(io::ErrorKind::ConnectionRefused, "connection failed")),
        ureq::Error::Io(source) => GetError::Io { url, source },
        ureq::Error::Timeout(which) => {
            GetError::Io { url, source: io::Error::new(io::ErrorKind::TimedOut, format!("timed out ({which})")) }
        }
        other => GetError::Protocol { url, message: other.to_string() },
    }
}

#[cfg(test)]
mod tests {
    use std::{
        io::{BufRead, Write},
        net::TcpListener,
    };

    use super::*;

    /// Serves one connection with `answer` and returns the request line it got.
    fn serve_once(answer: &'static str) -> (SocketAddr, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = String::new();
            let mut reader = std::io::BufReader::new(&stream);
            reader.read_line(&mut request).unwrap();
            // Read the whole request before answering and closing: unread bytes at close
            // make the kernel reset the connection, and the client may see the reset first.
            let mut header = String::new();
            while reader.read_line(&mut header).is_ok_and(|n| n > 0) && header != "\r\n" {
                header.clear();
            }
            stream.write_all(answer.as_bytes()).unwrap();
            request
        });
        (address, server)
    }

    #[test]
    fn status_and_body_of_any_answer() {
        let (address, server) = serve_once(
            "HTTP/1.1 404 Not Found\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\nno such\r\n\r\nthing",
        );
        let response = get(address, "/debug/volumes/x?limit=1", Duration::from_secs(5)).unwrap();
        assert_eq!((response.status, response.body.as_str()), (404, "no such\r\n\r\nthing"));
        assert_eq!(server.join().unwrap(), "GET /debug/volumes/x?limit=1 HTTP/1.1\r\n");
    }

    #[test]
    fn an_answer_that_is_not_http_is_an_error() {
        let (address, server) = serve_once("hello");
        let answer = get(address, "/", Duration::from_secs(5));
        assert!(matches!(answer, Err(GetError::Protocol { .. })), "{answer:?}");
        server.join().unwrap();
    }

    #[test]
    fn nothing_listening_is_a_connect_error() {
        let address = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let answer = get(address, "/", Duration::from_secs(5));
        assert!(
            matches!(&answer, Err(GetError::Connect { source, .. }) if source.kind() == io::ErrorKind::ConnectionRefused),
            "{answer:?}"
        );
    }
}

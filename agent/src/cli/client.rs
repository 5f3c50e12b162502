//! The one client of the agent's own HTTP listeners (debug API, metrics): a blocking
//! HTTP/1.0 GET on a fresh local TCP connection, read to the end. The CLI views, the demo
//! and the integration tests call it; `cargo xtask bench` compiles this same file into
//! xtask (`#[path]`), so it depends on std and thiserror only.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

/// A whole answer: the status code and the body (lossily UTF-8).
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

#[derive(Debug, thiserror::Error)]
pub enum GetError {
    /// Nothing accepted the connection (`source.kind()` tells refused from timed out).
    #[error("connecting to {address}: {source}")]
    Connect {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("talking to {address}: {source}")]
    Io {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("{address} answered without an HTTP status line")]
    NotHttp { address: SocketAddr },
}

/// `GET path` from `address`; `timeout` bounds the connect and each read and write.
pub fn get(address: SocketAddr, path: &str, timeout: Duration) -> Result<Response, GetError> {
    let io = |source| GetError::Io { address, source };
    let mut stream =
        TcpStream::connect_timeout(&address, timeout).map_err(|source| GetError::Connect { address, source })?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\nConnection: close\r\n\r\n").map_err(io)?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).map_err(io)?;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").ok_or(GetError::NotHttp { address })?;
    // "HTTP/1.1 200 OK"
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or(GetError::NotHttp { address })?;
    Ok(Response { status, body: body.to_owned() })
}

#[cfg(test)]
mod tests {
    use std::{io::BufRead, net::TcpListener};

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
        let (address, server) =
            serve_once("HTTP/1.1 404 Not Found\r\ncontent-type: text/plain\r\n\r\nno such\r\n\r\nthing");
        let response = get(address, "/debug/volumes/x?limit=1", Duration::from_secs(5)).unwrap();
        assert_eq!((response.status, response.body.as_str()), (404, "no such\r\n\r\nthing"));
        assert_eq!(server.join().unwrap(), "GET /debug/volumes/x?limit=1 HTTP/1.0\r\n");
    }

    #[test]
    fn an_answer_that_is_not_http_is_an_error() {
        let (address, server) = serve_once("hello");
        assert!(matches!(get(address, "/", Duration::from_secs(5)), Err(GetError::NotHttp { .. })));
        server.join().unwrap();
    }
}

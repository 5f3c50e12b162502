//! A minimal HTTP/1.0 GET (fresh connection, timed) for the agent's listeners.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

/// GET over a fresh connection; (time from connect to last byte, body). Fails unless 200.
pub(super) fn get(addr: SocketAddr, path: &str) -> anyhow::Result<(Duration, String)> {
    let start = Instant::now();
    let mut s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let took = start.elapsed();
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    if !head.lines().next().unwrap_or("").contains(" 200") {
        bail!("GET {path}: {}", head.lines().next().unwrap_or("no answer"));
    }
    Ok((took, body.to_owned()))
}

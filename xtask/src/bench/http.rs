//! The timed GET the benchmarks make, with the agent's own HTTP client
//! ([`volguard_client`], `agent-client/`).

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use anyhow::bail;

use volguard_client as http_client;

/// GET over a fresh connection; (time from connect to last byte, body). Fails unless 200.
pub(super) fn get(addr: SocketAddr, path: &str) -> anyhow::Result<(Duration, String)> {
    let start = Instant::now();
    let response = http_client::get(addr, path, Duration::from_secs(30))?;
    let took = start.elapsed();
    if response.status != 200 {
        bail!("GET {path}: HTTP {}", response.status);
    }
    Ok((took, response.body))
}

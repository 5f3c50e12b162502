//! The timed GET the benchmarks make: the agent's own HTTP client (`agent/src/cli/client.rs`,
//! compiled in here by path, since xtask must not link the agent, whose build compiles eBPF).

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use anyhow::bail;

#[path = "../../../agent/src/cli/client.rs"]
mod client;

/// GET over a fresh connection; (time from connect to last byte, body). Fails unless 200.
pub(super) fn get(addr: SocketAddr, path: &str) -> anyhow::Result<(Duration, String)> {
    let start = Instant::now();
    let response = client::get(addr, path, Duration::from_secs(30))?;
    let took = start.elapsed();
    if response.status != 200 {
        bail!("GET {path}: HTTP {}", response.status);
    }
    Ok((took, response.body))
}

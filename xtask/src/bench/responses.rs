//! Benchmark 4: /metrics and /debug/volumes response times on the loaded agent of
//! benchmark 3 ([`super::memory`]), against /healthz on the same listener.

use std::fmt::Write as _;

use super::{
    Bench, Row,
    agent::Loaded,
    http::get,
    stats::{median, pct},
};

const REQUESTS: usize = 50;

impl Bench {
    pub(super) fn responses(&mut self, loaded: &Loaded) -> anyhow::Result<()> {
        let a = &loaded.agent;
        let mut series = Vec::new();
        for (label, addr, path) in [
            ("/healthz (metrics listener)", a.metrics, "/healthz"),
            ("/metrics", a.metrics, "/metrics"),
            ("/healthz (debug listener)", a.debug, "/healthz"),
            ("/debug/volumes", a.debug, "/debug/volumes"),
        ] {
            get(addr, path)?; // warm-up
            let mut ms = Vec::new();
            let mut bytes = 0;
            for _ in 0..REQUESTS {
                let (d, body) = get(addr, path)?;
                bytes = body.len();
                ms.push(d.as_secs_f64() * 1e3);
            }
            println!("  {label}: median {:.3} ms, p99 {:.3} ms, {bytes} bytes", median(&ms), pct(&ms, 99.0));
            series.push((label, ms, bytes));
        }
        let h_m = median(&series[0].1);
        let m = median(&series[1].1);
        let h_d = median(&series[2].1);
        let d = median(&series[3].1);
        self.report.rows.push(Row::new(
            "4a. /metrics response time (10,000 volumes in the inventory, none mounted)",
            format!("{h_m:.3} ms (/healthz)"),
            format!("{m:.3} ms (p99 {:.3})", pct(&series[1].1, 99.0)),
            format!("{:.1}× /healthz", m / h_m),
            "≤ 5 ms",
            Some(m <= 5.0),
        ));
        self.report.rows.push(Row::new(
            "4b. /debug/volumes response time (10,000 volumes in the inventory, none mounted)",
            format!("{h_d:.3} ms (/healthz)"),
            format!("{d:.3} ms (p99 {:.3}, {} KiB)", pct(&series[3].1, 99.0), series[3].2 / 1024),
            format!("{:.1}× /healthz", d / h_d),
            "— (none set)",
            None,
        ));
        let _ = writeln!(
            self.report.details,
            "### 4. Response times\n\nThe loaded agent of 3. {REQUESTS} sequential requests per path after one warm-up, \
             each a new TCP connection, `GET <path> HTTP/1.0` + `Connection: close`, timed from connect to the \
             last byte read. /healthz on the same listener is the baseline.\n"
        );
        for (label, ms, bytes) in &series {
            let _ = writeln!(
                self.report.details,
                "- {label}: median {:.3} ms, p99 {:.3} ms, max {:.3} ms, {bytes} bytes",
                median(ms),
                pct(ms, 99.0),
                ms.iter().cloned().fold(0.0, f64::max)
            );
        }
        self.report.details.push('\n');
        Ok(())
    }
}

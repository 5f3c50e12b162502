//! Benchmark 7: the loaded agent of benchmark 3 (10,000 volumes of 110 pods in its inventory) with
//! nothing happening: the CPU it uses, and the worst wait of a liveness probe every 50 ms.
//! Before the CSI checks and the views left the event loop, it used a whole core and
//! probes waited up to 10 s.

use std::{
    fmt::Write as _,
    time::{Duration, Instant},
};

use super::{Bench, Row, agent::Loaded, http::get, stats::pct, sys::clock_tick};

const CPU_WINDOW: Duration = Duration::from_secs(30);
const PROBE_WINDOW: Duration = Duration::from_secs(60);
const PROBE_EVERY: Duration = Duration::from_millis(50);

impl Bench {
    pub(super) fn at_rest(&mut self, loaded: &Loaded) -> anyhow::Result<()> {
        let a = &loaded.agent;
        std::thread::sleep(Duration::from_secs(2)); // the start-up's judgements and views settle
        let (ticks, started) = (a.cpu_ticks()?, Instant::now());
        std::thread::sleep(CPU_WINDOW);
        let cpu = (a.cpu_ticks()? - ticks) as f64 / clock_tick() / started.elapsed().as_secs_f64() * 100.0;
        println!("  CPU at rest: {cpu:.2} % of a core over {} s", CPU_WINDOW.as_secs());
        let mut ms = Vec::new();
        let end = Instant::now() + PROBE_WINDOW;
        while Instant::now() < end {
            let sent = Instant::now();
            let (took, _) = get(a.metrics, "/healthz")?;
            ms.push(took.as_secs_f64() * 1e3);
            std::thread::sleep(PROBE_EVERY.saturating_sub(sent.elapsed()));
        }
        let worst = ms.iter().cloned().fold(0.0, f64::max);
        let p99 = pct(&ms, 99.0);
        println!("  /healthz every 50 ms: {} probes, p99 {p99:.2} ms, worst {worst:.2} ms", ms.len());
        self.report.rows.push(Row::new(
            "7a. agent CPU at rest, 10,000 volumes in the inventory (none mounted)",
            "—".into(),
            format!("{cpu:.2} % of a core"),
            format!("{cpu:.2} %"),
            "≤ 1 %",
            Some(cpu <= 1.0),
        ));
        self.report.rows.push(Row::new(
            "7b. /healthz every 50 ms for 60 s, 10,000 volumes in the inventory: worst",
            format!("p99 {p99:.2} ms"),
            format!("worst {worst:.2} ms (n={})", ms.len()),
            format!("{worst:.2} ms"),
            "≤ 10 ms",
            Some(worst <= 10.0),
        ));
        let _ = writeln!(
            self.report.details,
            "### 7. The loaded agent at rest\n\nThe loaded agent of 3 (10,000 ReadWriteOncePod volumes used by 110 \
             pods, from the inventory; not mounted), 2 s after 4 ended. **7a**: its utime+stime over {} s, as a \
             share of one core. **7b**: then `GET /healthz` on the metrics listener every 50 ms for {} s (a new \
             connection each, timed from connect to the last byte): {} probes, p99 {p99:.3} ms, worst {worst:.3} \
             ms.\n",
            CPU_WINDOW.as_secs(),
            PROBE_WINDOW.as_secs(),
            ms.len()
        );
        Ok(())
    }
}

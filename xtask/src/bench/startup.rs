//! Benchmark 5: start-up to ready, reading a mount table of 5,000 extra bind mounts (held
//! by a [`Holder`] child) against one with none added.

use std::fmt::Write as _;

use super::{
    Bench, EMPTY_INVENTORY, REPS, Row,
    agent::Loaded,
    holder::Holder,
    stats::{list, median},
};

const TABLE_MOUNTS: usize = 5000;

impl Bench {
    pub(super) fn startup(&mut self) -> anyhow::Result<Option<Loaded>> {
        let empty = self.write_inventory("empty.yaml", EMPTY_INVENTORY)?;
        let full = Holder::start(&self.dir, TABLE_MOUNTS)?;
        let bare = Holder::start(&self.dir, 0)?;
        let (fl, bl) = (full.mountinfo_lines()?, bare.mountinfo_lines()?);
        println!("  mount tables: {fl} lines (5,000 binds) vs {bl} lines (baseline)");
        let (mut base, mut with) = (Vec::new(), Vec::new());
        for rep in 0..REPS {
            let a = self.start(&empty, &format!("/proc/{}/mountinfo", bare.pid()))?;
            base.push(a.ready_after.as_secs_f64() * 1e3);
            drop(a);
            let a = self.start(&empty, &format!("/proc/{}/mountinfo", full.pid()))?;
            with.push(a.ready_after.as_secs_f64() * 1e3);
            drop(a);
            println!("  rep {rep}: baseline {:.0} ms, 5,000 mounts {:.0} ms", base[rep], with[rep]);
        }
        let (b, m) = (median(&base), median(&with));
        self.report.rows.push(Row::new(
            "5. start-up to ready, 5,000 mounts in the table",
            format!("{b:.0} ms ({bl}-line table)"),
            format!("{m:.0} ms ({fl}-line table)"),
            format!("{:.2}×, +{:.0} ms", m / b, m - b),
            "≤ 500 ms",
            Some(m <= 500.0),
        ));
        let _ = writeln!(
            self.report.details,
            "### 5. Start-up to ready\n\nFrom `spawn()` of the agent to the arrival of its `volguard: ready:` stderr \
             line (programs loaded and attached, state built), `--mountinfo /proc/<holder>/mountinfo` where the \
             holder is a child in its own mount namespace holding {TABLE_MOUNTS} bind mounts (outside the \
             kubelet root) — {fl} lines — against a holder with none added ({bl} lines). Empty inventory. \
             {REPS} repetitions, alternating. ms baseline: {}; with 5,000 mounts: {}.\n",
            list(&base, 0),
            list(&with, 0)
        );
        Ok(None)
    }
}

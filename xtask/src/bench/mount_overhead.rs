//! Benchmark 1: the mount syscall overhead of the tracing programs. Bind + umount cycles
//! on the bench tmpfs, no agent vs a fresh agent attached, alternating.

use std::{
    fmt::Write as _,
    time::{Duration, Instant},
};

use super::{
    Bench, EMPTY_INVENTORY, REPS, Row,
    agent::Loaded,
    stats::{list, median},
    sys::{cpath, sys},
};

const CYCLES: usize = 10_000;

impl Bench {
    /// N bind + umount cycles outside the kubelet root, agent not running vs attached.
    pub(super) fn mount_overhead(&mut self) -> anyhow::Result<Option<Loaded>> {
        let src = self.path("m1/src");
        let tgt = self.path("m1/tgt");
        std::fs::create_dir_all(&src)?;
        std::fs::create_dir_all(&tgt)?;
        let inventory = self.write_inventory("empty.yaml", EMPTY_INVENTORY)?;
        let cycles = |n: usize| -> anyhow::Result<Duration> {
            let (s, t) = (cpath(&src), cpath(&tgt));
            let start = Instant::now();
            for _ in 0..n {
                // SAFETY: valid paths.
                sys(
                    unsafe { libc::mount(s.as_ptr(), t.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null()) },
                    "bind",
                )?;
                // SAFETY: valid path.
                sys(unsafe { libc::umount2(t.as_ptr(), 0) }, "umount")?;
            }
            Ok(start.elapsed())
        };
        cycles(200)?; // warm-up
        let (mut without, mut with) = (Vec::new(), Vec::new());
        for rep in 0..REPS {
            // Alternate, so that drifting load on the machine hits both sides alike.
            without.push(cycles(CYCLES)?.as_secs_f64());
            let agent = self.start(&inventory, "/proc/self/mountinfo")?;
            with.push(cycles(CYCLES)?.as_secs_f64());
            drop(agent);
            println!("  rep {rep}: without {:.1} ms, with agent {:.1} ms", without[rep] * 1e3, with[rep] * 1e3);
        }
        let (b, m) = (median(&without), median(&with));
        let per = |s: f64| s / CYCLES as f64 * 1e6;
        let ratio = m / b;
        self.report.rows.push(Row::new(
            "1. mount syscall overhead (bind+umount cycle, tracing only)",
            format!("{:.2} µs/cycle (no agent)", per(b)),
            format!("{:.2} µs/cycle (agent attached)", per(m)),
            format!("{ratio:.3}×"),
            "≤ 1.03×",
            Some(ratio <= 1.03),
        ));
        let _ = writeln!(
            self.report.details,
            "### 1. Mount syscall overhead\n\n{CYCLES} cycles of `mount(src, tgt, MS_BIND)` + `umount2(tgt, 0)` on a tmpfs \
             outside the kubelet root, in the bench's private mount namespace; {REPS} repetitions alternating \
             no agent / agent attached (a fresh agent per repetition, mode auto = quarantine here: the syscall \
             tracepoints are attached). Seconds per run: without {}, with {}. Ratio of medians {ratio:.3}.\n",
            list(&without, 4),
            list(&with, 4)
        );
        Ok(None)
    }
}

//! Benchmark 2: the lossless event rate. A ladder of paced bursts of failing mount(2)
//! calls ([`burst`]) until the agent loses events or the generator tops out.

use std::{
    fmt::Write as _,
    path::Path,
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use anyhow::anyhow;

use super::{
    Bench, EMPTY_INVENTORY, Row,
    agent::Loaded,
    stats::{list, median},
    sys::{clock_tick, cpath},
};

impl Bench {
    pub(super) fn event_rate(&mut self) -> anyhow::Result<Option<Loaded>> {
        const THREADS: usize = 4;
        const BURST: Duration = Duration::from_secs(2);
        const TRIES: usize = 3;
        let tgt = self.path("m2/tgt");
        std::fs::create_dir_all(&tgt)?;
        let empty = self.write_inventory("empty.yaml", EMPTY_INVENTORY)?;
        // The generator's own ceiling, no agent: the baseline.
        let (calls, took) = burst(u64::MAX, THREADS, BURST, &tgt);
        let ceiling = calls as f64 / took.as_secs_f64();
        println!("  generator ceiling without agent: {ceiling:.0} calls/s");
        // The rate the syscall records cross the ring buffer: a syscall backend (fanotify,
        // auto's choice here, has no ring buffer and counts no syscall).
        let agent = self.start_traced_by(&empty, "/proc/self/mountinfo", "tracepoints")?;
        let (calls, took) = burst(u64::MAX, THREADS, BURST, &tgt);
        let ceiling_with = calls as f64 / took.as_secs_f64();
        std::thread::sleep(Duration::from_millis(1500));
        println!("  generator ceiling with agent: {ceiling_with:.0} calls/s");
        let tick = clock_tick();
        let mut best: Option<(f64, f64)> = None;
        let mut lines = Vec::new();
        let mut stop_reason = String::from("the ladder ended");
        for rate in [25_000u64, 50_000, 100_000, 150_000, 200_000, 300_000, 400_000, 600_000, 800_000] {
            let mut losses = Vec::new();
            let mut rates = Vec::new();
            let mut cpus = Vec::new();
            let mut seen = Vec::new();
            for _ in 0..TRIES {
                let lost0 = agent.metric("volguard_events_lost_total")?;
                let seen0 = agent.metric("volguard_mount_syscalls_total")?;
                let cpu0 = agent.cpu_ticks()?;
                let (calls, took) = burst(rate, THREADS, BURST, &tgt);
                let cpu1 = agent.cpu_ticks()?;
                std::thread::sleep(Duration::from_millis(1500)); // the lost counter is read every 1 s
                losses.push(agent.metric("volguard_events_lost_total")? - lost0);
                seen.push(agent.metric("volguard_mount_syscalls_total")? - seen0);
                rates.push(calls as f64 / took.as_secs_f64());
                cpus.push((cpu1 - cpu0) as f64 / tick / took.as_secs_f64() * 100.0);
            }
            let (achieved, cpu) = (median(&rates), median(&cpus));
            let line = format!(
                "- asked {rate}/s: achieved {achieved:.0}/s, lost per 2 s burst {}, events counted {}, agent CPU {cpu:.0}% of one core",
                list(&losses, 0),
                list(&seen, 0)
            );
            println!("  {line}");
            lines.push(line);
            if losses.iter().any(|&l| l > 0.0) {
                stop_reason = format!("events were lost at {rate}/s asked ({achieved:.0}/s achieved)");
                break;
            }
            best = Some((achieved, cpu));
            if achieved < 0.9 * rate as f64 {
                stop_reason = format!("the generator could not go faster ({achieved:.0}/s achieved of {rate}/s asked)");
                break;
            }
        }
        drop(agent);
        let (rate, cpu) = best.ok_or_else(|| anyhow!("events were lost even at the lowest rate; {stop_reason}"))?;
        self.report.rows.push(Row::new(
            "2. lossless event rate (failing binds, 4 threads)",
            format!("{ceiling:.0}/s generator ceiling, no agent"),
            format!("{rate:.0} events/s with 0 lost; agent CPU {cpu:.0}%"),
            format!("{:.2} of ceiling", rate / ceiling),
            "≥ 100,000 events/s",
            Some(rate >= 100_000.0),
        ));
        let _ = writeln!(
            self.report.details,
            "### 2. Lossless event rate\n\n{THREADS} threads issue `mount(\"/nonexistent…\", tgt, MS_BIND)` (fails with \
             ENOENT, still a traced mount(2) entry and exit), paced to the asked rate in 1 ms steps for {} s; \
             {TRIES} bursts per rate; lost = delta of `volguard_events_lost_total` 1.5 s after the burst; \
             agent CPU = delta of utime+stime (/proc/<pid>/stat) over the burst. Generator ceiling (as fast as \
             it goes): {ceiling:.0}/s without the agent, {ceiling_with:.0}/s with it. Stopped because {stop_reason}.\n",
            BURST.as_secs()
        );
        for l in lines {
            let _ = writeln!(self.report.details, "{l}");
        }
        self.report.details.push('\n');
        Ok(None)
    }
}

/// Calls at `rate`/s (u64::MAX: as fast as possible) from `threads` threads for `dur`;
/// each a mount(2) that fails with ENOENT. Returns calls made and the time taken.
fn burst(rate: u64, threads: usize, dur: Duration, tgt: &Path) -> (u64, Duration) {
    let total = AtomicU64::new(0);
    let src = c"/nonexistent/volguard-bench-source";
    let t = cpath(tgt);
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                let per = rate / threads as u64;
                let begun = Instant::now();
                let mut n = 0u64;
                loop {
                    let el = begun.elapsed();
                    if el >= dur {
                        break;
                    }
                    let due = if rate == u64::MAX { n + 64 } else { (per as f64 * el.as_secs_f64()) as u64 + 1 };
                    if n >= due {
                        std::thread::sleep(Duration::from_micros(200));
                        continue;
                    }
                    let batch = due.min(n + 256) - n;
                    for _ in 0..batch {
                        // SAFETY: valid strings; the call fails (no such source).
                        unsafe {
                            libc::mount(src.as_ptr(), t.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null())
                        };
                    }
                    n += batch;
                }
                total.fetch_add(n, Ordering::Relaxed);
            });
        }
    });
    (total.load(Ordering::Relaxed), start.elapsed())
}

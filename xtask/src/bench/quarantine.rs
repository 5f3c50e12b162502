//! Benchmark 6: the quarantine reaction. Two pods share a ReadWriteOncePod volume; pod-a
//! publishes it first, then each publish by pod-b is timed until the agent has detached
//! or masked it.

use std::{
    fmt::Write as _,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::bail;

use super::{
    Bench, Row,
    agent::{Agent, Loaded},
    http::get,
    stats::pct,
    sys::{bind, cpath, ino},
};

const REACTIONS: usize = 100;

impl Bench {
    pub(super) fn quarantine(&mut self) -> anyhow::Result<Option<Loaded>> {
        let vol = self.path("volumes/pv-data");
        std::fs::create_dir_all(&vol)?;
        let kubelet = self.kubelet()?;
        let target = |pod: &str| -> anyhow::Result<PathBuf> {
            let t = kubelet.join(format!("pods/{pod}/volumes/kubernetes.io~csi/pv-data/mount"));
            std::fs::create_dir_all(&t)?;
            Ok(t)
        };
        let (ta, tb) = (target("pod-a")?, target("pod-b")?);
        let inventory = self.write_inventory("rwop.yaml", RWOP_INVENTORY)?;
        let agent = self.start(&inventory, "/proc/self/mountinfo")?;
        if !agent.ready_line.contains("mode=quarantine") {
            bail!("the agent is not in quarantine mode here: {}", agent.ready_line);
        }
        bind(&vol, &ta)?;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let (_, body) = get(agent.debug, "/debug/volumes/pv-data")?;
            if body.contains("\"owner\":\"pod-a\"") {
                break;
            }
            if Instant::now() > deadline {
                bail!("pod-a never became the owner of pv-data: {body}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let vol_ino = ino(&vol)?;
        let tb_ino = ino(&tb)?;
        let (mut observed, mut reported) = (Vec::new(), Vec::new());
        let conflicts = |a: &Agent| a.lines_matching("CONFLICT quarantined").len();
        let mut missed = 0;
        for i in 0..REACTIONS {
            let before = conflicts(&agent);
            bind(&vol, &tb)?;
            let returned = Instant::now();
            // Spin until the bind is no longer what the target shows (detached, or masked).
            let deadline = returned + Duration::from_secs(2);
            let mut gone = None;
            while Instant::now() < deadline {
                if ino(&tb).map_or(true, |n| n != vol_ino) {
                    gone = Some(returned.elapsed());
                    break;
                }
                std::thread::yield_now();
            }
            let line = agent.wait_new_line("CONFLICT quarantined", before, Duration::from_secs(5));
            match (gone, line) {
                (Some(g), Ok(line)) => {
                    observed.push(g.as_secs_f64() * 1e6);
                    let micros = line.rsplit('(').next().unwrap_or("").trim_end_matches(')').trim_end_matches(" µs");
                    if let Ok(m) = micros.trim().parse::<f64>() {
                        reported.push(m);
                    }
                }
                _ => missed += 1,
            }
            // Undo: the mask (and anything left) until the target is the bare directory again.
            for _ in 0..8 {
                if ino(&tb)? == tb_ino {
                    break;
                }
                // SAFETY: valid path.
                unsafe { libc::umount2(cpath(&tb).as_ptr(), libc::MNT_DETACH) };
            }
            std::thread::sleep(Duration::from_millis(20));
            if i % 25 == 24 {
                println!("  {} reactions", i + 1);
            }
        }
        // SAFETY: valid path.
        unsafe { libc::umount2(cpath(&ta).as_ptr(), libc::MNT_DETACH) };
        drop(agent);
        if observed.is_empty() {
            bail!("no quarantine was observed in {REACTIONS} tries");
        }
        let (o50, o99) = (pct(&observed, 50.0), pct(&observed, 99.0));
        println!(
            "  observed mount return → bind gone: p50 {o50:.0} µs, p99 {o99:.0} µs ({} samples, {missed} missed)",
            observed.len()
        );
        self.report.rows.push(Row::new(
            "6a. quarantine: mount(2) return → offending bind gone (seen by the publisher)",
            "—".into(),
            format!("p50 {o50:.0} µs, p99 {o99:.0} µs (n={}, {missed} missed)", observed.len()),
            format!("p99 {:.2} ms", o99 / 1e3),
            "p99 ≤ 2 ms",
            Some(o99 <= 2000.0 && missed == 0),
        ));
        if !reported.is_empty() {
            let (r50, r99) = (pct(&reported, 50.0), pct(&reported, 99.0));
            println!("  agent-reported reaction: p50 {r50:.0} µs, p99 {r99:.0} µs");
            self.report.rows.push(Row::new(
                "6b. quarantine: agent's own reaction (its log's µs)",
                "—".into(),
                format!("p50 {r50:.0} µs, p99 {r99:.0} µs (n={})", reported.len()),
                format!("p99 {:.2} ms", r99 / 1e3),
                "(part of 6a)",
                None,
            ));
        }
        let _ = writeln!(
            self.report.details,
            "### 6. Quarantine reaction\n\nInventory: pods pod-a and pod-b share PVC data → PV pv-data, \
             ReadWriteOncePod. pod-a publishes first (a bind onto its kubelet target) and becomes the owner; then \
             {REACTIONS} times: bind pv-data onto pod-b's target, and measure\n\n\
             - **6a** (the target's interval, from the outside): from the return of the publisher's successful \
             `mount(2)` to the first `stat(target)` that no longer shows the bound directory (its inode), spinning \
             on stat with `sched_yield`. This is syscall exit → offending mount detached, plus the tracepoint → \
             ring buffer → agent wake-up path; it includes up to one stat of polling granularity.\n\
             - **6b** (the agent's own figure): the `(N µs)` of its `CONFLICT quarantined` log line, which the agent \
             measures from entering its quarantine routine (after decoding the event and deciding the conflict) to \
             the read-only mask being mounted (setns into the publisher's mount namespace, detach, mask).\n\n\
             Then the mask is unmounted and the next round starts after 20 ms. Missed rounds (no detach seen \
             within 2 s or no log line within 5 s): {missed}.\n"
        );
        Ok(None)
    }
}

const RWOP_INVENTORY: &str = "\
nodeName: bench-node
pods:
  - {uid: pod-a, namespace: bench, name: db-0, volumes: [{name: data, persistentVolumeClaim: data}]}
  - {uid: pod-b, namespace: bench, name: db-1, volumes: [{name: data, persistentVolumeClaim: data}]}
persistentVolumes:
  - {name: pv-data, accessModes: [ReadWriteOncePod], claimRef: bench/data, csi: {driver: bench.csi.volguard.io, volumeHandle: data-1}}
persistentVolumeClaims:
  - {namespace: bench, name: data, accessModes: [ReadWriteOncePod], volumeName: pv-data}
";

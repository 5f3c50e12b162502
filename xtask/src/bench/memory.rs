//! Benchmark 3: the agent's memory (VmRSS) idle and loaded with 10,000 volumes. Its last
//! loaded agent is handed back to serve benchmark 4 ([`super::responses`]).

use std::{fmt::Write as _, time::Duration};

use super::{
    Bench, EMPTY_INVENTORY, REPS, Row,
    agent::Loaded,
    stats::{list, median},
};

const VOLUMES: usize = 10_000;
const PODS: usize = 110;

impl Bench {
    pub(super) fn memory(&mut self) -> anyhow::Result<Option<Loaded>> {
        let empty = self.write_inventory("empty.yaml", EMPTY_INVENTORY)?;
        let big = self.write_inventory("loaded.yaml", &loaded_inventory())?;
        let (mut idle, mut loaded) = (Vec::new(), Vec::new());
        let mut keep = None;
        for rep in 0..REPS {
            let agent = self.start(&empty, "/proc/self/mountinfo")?;
            std::thread::sleep(Duration::from_secs(1));
            idle.push(agent.rss_kib()? as f64 / 1024.0);
            drop(agent);
            let agent = self.start(&big, "/proc/self/mountinfo")?;
            let n = agent.wait_volumes(VOLUMES, Duration::from_secs(60))?;
            std::thread::sleep(Duration::from_secs(1));
            loaded.push(agent.rss_kib()? as f64 / 1024.0);
            println!(
                "  rep {rep}: idle {:.1} MiB, loaded ({n} volumes in /debug/volumes) {:.1} MiB",
                idle[rep], loaded[rep]
            );
            if rep == REPS - 1 {
                keep = Some(Loaded { agent });
            }
        }
        let (i, l) = (median(&idle), median(&loaded));
        self.report.rows.push(Row::new(
            "3a. agent RSS idle (empty inventory)",
            "—".into(),
            format!("{i:.1} MiB"),
            format!("{i:.1} MiB"),
            // Issue 16's targets (they were 20 and 48 MiB before).
            "≤ 16 MiB",
            Some(i <= 16.0),
        ));
        self.report.rows.push(Row::new(
            "3b. agent RSS loaded (10,000 RWOP volumes, 110 pods)",
            format!("{i:.1} MiB (idle)"),
            format!("{l:.1} MiB"),
            format!("{:.2}× idle, +{:.1} MiB", l / i, l - i),
            "≤ 40 MiB",
            Some(l <= 40.0),
        ));
        let _ = writeln!(
            self.report.details,
            "### 3. Agent memory\n\nVmRSS from /proc/<pid>/status, 1 s after ready (idle: inventory with no pods; \
             loaded: 1 s after /debug/volumes lists all {VOLUMES} volumes — an inventory of {VOLUMES} \
             ReadWriteOncePod PVs and PVCs and {PODS} pods referencing them, about 91 each; no published \
             mounts). {REPS} repetitions. MiB idle: {}; loaded: {}.\n",
            list(&idle, 1),
            list(&loaded, 1)
        );
        Ok(keep)
    }
}

/// 10,000 RWOP PVs and PVCs, 110 pods referencing them (volume i belongs to pod i mod 110).
pub(super) fn loaded_inventory() -> String {
    let mut s = String::from("nodeName: bench-node\npods:\n");
    for p in 0..PODS {
        let _ = write!(s, "  - {{uid: pod-{p:04}, namespace: bench, name: p-{p}, volumes: [");
        for (k, v) in (p..VOLUMES).step_by(PODS).enumerate() {
            let _ = write!(s, "{}{{name: v{v}, persistentVolumeClaim: c-{v:05}}}", if k > 0 { ", " } else { "" });
        }
        s.push_str("]}\n");
    }
    s.push_str("persistentVolumes:\n");
    for v in 0..VOLUMES {
        let _ = writeln!(
            s,
            "  - {{name: pv-{v:05}, accessModes: [ReadWriteOncePod], claimRef: bench/c-{v:05}, \
             csi: {{driver: bench.csi.volguard.io, volumeHandle: h-{v:05}}}}}"
        );
    }
    s.push_str("persistentVolumeClaims:\n");
    for v in 0..VOLUMES {
        let _ = writeln!(
            s,
            "  - {{namespace: bench, name: c-{v:05}, accessModes: [ReadWriteOncePod], volumeName: pv-{v:05}}}"
        );
    }
    s
}

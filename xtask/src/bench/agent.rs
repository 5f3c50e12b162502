//! The agent under test as a child process: its command line, start-up (waiting for its
//! `ready` line and listener addresses), what the benchmarks read from it (stderr lines,
//! RSS, CPU ticks, metrics, /debug/volumes) and its stop on drop.

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    path::Path,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context, anyhow, bail};

use super::http::get;

const PIN_ROOT: &str = "/sys/fs/bpf/volguard-bench";

pub(super) fn agent_args(kubelet: &Path, inventory: &Path, mountinfo: &str) -> Vec<String> {
    [
        "run",
        "--kubelet-root",
        &kubelet.display().to_string(),
        "--inventory",
        &inventory.display().to_string(),
        "--mountinfo",
        mountinfo,
        "--mode",
        "auto",
        "--pin-root",
        PIN_ROOT,
        "--keep-enforcement-on-exit=false",
        "--metrics-address",
        "127.0.0.1:0",
        "--debug-address",
        "127.0.0.1:0",
        "--reconcile-interval",
        "30s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The agent child; SIGTERM (then SIGKILL after 10 s) when dropped.
pub(super) struct Agent {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    pub(super) ready_after: Duration,
    pub(super) ready_line: String,
    pub(super) metrics: SocketAddr,
    pub(super) debug: SocketAddr,
}

pub(super) struct Loaded {
    pub(super) agent: Agent,
}

impl Agent {
    pub(super) fn start(binary: &Path, args: &[String]) -> anyhow::Result<Self> {
        let spawned = Instant::now();
        let mut child = Command::new(binary)
            .args(args)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let ready_at = Arc::new(Mutex::new(None));
        if let Some(stderr) = child.stderr.take() {
            let (sink, ready) = (lines.clone(), ready_at.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if line.contains("volguard: ready:") {
                        *ready.lock().unwrap_or_else(|e| e.into_inner()) = Some(spawned.elapsed());
                    }
                    sink.lock().unwrap_or_else(|e| e.into_inner()).push(line);
                }
            });
        }
        let mut agent = Self {
            child,
            lines,
            ready_after: Duration::ZERO,
            ready_line: String::new(),
            metrics: "0.0.0.0:0".parse()?,
            debug: "0.0.0.0:0".parse()?,
        };
        agent.ready_line = agent.wait_line("volguard: ready:", Duration::from_secs(60))?;
        agent.ready_after = ready_at.lock().unwrap_or_else(|e| e.into_inner()).unwrap_or_default();
        agent.metrics = agent.address("metrics on http://")?;
        agent.debug = agent.address("debug API on http://")?;
        Ok(agent)
    }

    pub(super) fn lines_matching(&self, needle: &str) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|l| l.contains(needle)).cloned().collect()
    }

    pub(super) fn wait_new_line(&self, needle: &str, skip: usize, timeout: Duration) -> anyhow::Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.lines_matching(needle).into_iter().nth(skip) {
                return Ok(l);
            }
            if Instant::now() > deadline {
                bail!("timed out waiting for {needle:?}");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn wait_line(&mut self, needle: &str, timeout: Duration) -> anyhow::Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.lines_matching(needle).into_iter().next() {
                return Ok(l);
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let all = self.lines.lock().unwrap_or_else(|e| e.into_inner()).clone();
                // The last lines that are not backtrace frames: the error, not `_start`.
                let frame = |l: &&String| {
                    let t = l.trim_start();
                    t.starts_with("at ") || t.split_once(": ").is_some_and(|(n, _)| n.parse::<u32>().is_ok())
                };
                let said: Vec<&String> = all.iter().filter(|l| !frame(l)).collect();
                let tail = said.iter().rev().take(8).rev().map(|l| l.as_str()).collect::<Vec<_>>().join("\n  ");
                bail!("the agent exited ({status}) while waiting for {needle:?}:\n  {tail}");
            }
            if Instant::now() > deadline {
                bail!("timed out waiting for {needle:?}");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn address(&mut self, prefix: &str) -> anyhow::Result<SocketAddr> {
        let line = self.wait_line(prefix, Duration::from_secs(10))?;
        let text = line.split(prefix).nth(1).unwrap_or_default().trim();
        let text = text.split_whitespace().next().unwrap_or_default().trim_end_matches('/');
        text.parse().with_context(|| format!("unexpected address {text:?} in {line:?}"))
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(super) fn rss_kib(&self) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|k| k.parse().ok())
            .ok_or_else(|| anyhow!("no VmRSS in /proc/{}/status", self.pid()))
    }

    pub(super) fn cpu_ticks(&self) -> anyhow::Result<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid()))?;
        // Fields after the command (which may hold spaces) start at ") ".
        let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or_default();
        let f: Vec<&str> = rest.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of stat, 12 and 13 of the rest (0-based 11, 12).
        let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        Ok(n(11) + n(12))
    }

    /// The sum of a metric's samples on /metrics.
    pub(super) fn metric(&self, name: &str) -> anyhow::Result<f64> {
        let (_, body) = get(self.metrics, "/metrics")?;
        Ok(body
            .lines()
            .filter(|l| l.starts_with(name) && matches!(l.as_bytes().get(name.len()), Some(b' ' | b'{')))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }

    /// Polls /debug/volumes until it lists `n` volumes.
    pub(super) fn wait_volumes(&self, n: usize, timeout: Duration) -> anyhow::Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            let (_, body) = get(self.debug, "/debug/volumes")?;
            let count = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["volumes"].as_array().map(Vec::len))
                .unwrap_or(0);
            if count >= n {
                return Ok(count);
            }
            if Instant::now() > deadline {
                bail!("/debug/volumes lists {count} volumes, not {n}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let pid = self.pid() as i32;
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

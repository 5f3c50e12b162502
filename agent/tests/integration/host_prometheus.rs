//! A real Prometheus server scrapes a real agent while real mounts happen in a private
//! mount namespace; everything is checked through Prometheus's HTTP API: the target is up
//! with no scrape error, `histogram_quantile` over kubelet's histogram returns a value, and
//! the conflict counter rises after a conflicting publish. The debug API and the CLI are
//! checked against the same running agent.

use std::{
    net::SocketAddr,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use nix::errno::Errno;
use serde_json::Value;
use volguard::cli::client::{self, GetError};

use crate::support::{
    HTTP_TIMEOUT, have_root, http_get,
    kubelet::{Agent, KubeletTree, MountNs, agent_binary, pin_root, syscall_backend, uninstall},
};

const INVENTORY: &str = "\
pods:
  - {uid: pod-a, namespace: shop, name: db-0, volumes: [{name: data, persistentVolumeClaim: data}]}
  - {uid: pod-b, namespace: shop, name: db-1, volumes: [{name: data, persistentVolumeClaim: data}]}
  # A generic ephemeral volume whose PVC does not exist: a node-model finding.
  - {uid: pod-c, namespace: shop, name: web, volumes: [{name: cache, ephemeral: {}}]}
persistentVolumes:
  - {name: pv-data, accessModes: [ReadWriteOncePod], claimRef: shop/data, csi: {driver: hostpath.csi.k8s.io, volumeHandle: h-1}}
persistentVolumeClaims:
  - {namespace: shop, name: data, accessModes: [ReadWriteOncePod], volumeName: pv-data}
";

fn encode(query: &str) -> String {
    query
        .bytes()
        .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}

/// A Prometheus server on loopback scraping `target` every second.
struct Prometheus {
    child: Child,
    address: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(target: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
                 scrape_configs:\n  - job_name: volguard\n    static_configs: [{{targets: ['{target}']}}]\n"
            ),
        )
        .unwrap();
        let address = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={address}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (Debian package `prometheus`, installed by `cargo xtask setup`)");
        Self { child, address, _dir: dir }
    }

    /// Polls an instant query until `check` accepts its result, for up to 30 s.
    fn query_until(&self, query: &str, check: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let result = self.query(query);
            if check(&result) {
                return result;
            }
            assert!(Instant::now() < deadline, "{query}: never as expected; last result {result:?}");
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn query(&self, query: &str) -> Vec<Value> {
        match self.api(&format!("/api/v1/query?query={}", encode(query))) {
            Some(data) => data["result"].as_array().cloned().unwrap_or_default(),
            None => Vec::new(),
        }
    }

    /// `data` of a successful API answer, `None` while Prometheus is not up yet.
    fn api(&self, path: &str) -> Option<Value> {
        let (status, body) = match client::get(self.address, path, HTTP_TIMEOUT) {
            Err(GetError::Connect { .. }) => return None,
            answer => answer.map(|r| (r.status, r.body)).unwrap_or_else(|e| panic!("{path}: {e}")),
        };
        let json: Value = serde_json::from_str(&body).ok()?;
        assert_eq!((status, json["status"].as_str()), (200, Some("success")), "{path}: {body}");
        Some(json["data"].clone())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn value(result: &[Value]) -> Option<f64> {
    result.first()?["value"][1].as_str()?.parse().ok()
}

// Long by design: one Prometheus and one agent through the whole story.
#[test]
fn a_real_prometheus_scrapes_the_agent_while_real_mounts_happen() {
    if !have_root("a_real_prometheus_scrapes_the_agent_while_real_mounts_happen") {
        return;
    }
    let tree = KubeletTree::new();
    let ns = MountNs::new();
    let inventory = tree.tmp.path().join("inventory.yaml");
    std::fs::write(&inventory, INVENTORY).unwrap();
    // A CSI driver socket that accepts and hangs up: the CSI checks report it.
    let socket = tree.root().join("plugins/standin.csi.volguard.io/csi.sock");
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    std::thread::spawn(move || listener.incoming().for_each(drop));
    let pins = pin_root("prometheus");
    // kubelet's histogram is measured from syscall entry to exit.
    let [flag, backend] = syscall_backend();
    let agent =
        Agent::start_in(&ns, &tree.root(), &pins, &[], &["--inventory", inventory.to_str().unwrap(), flag, backend]);
    let (metrics, debug) = (agent.address("metrics"), agent.address("debug API"));
    let prometheus = Prometheus::start(&metrics);

    // The target is up with no scrape error.
    prometheus.query_until("up{job=\"volguard\"}", |r| value(r) == Some(1.0));
    let targets = prometheus.api("/api/v1/targets").unwrap();
    let target = &targets["activeTargets"][0];
    assert_eq!((target["health"].as_str(), target["lastError"].as_str()), (Some("up"), Some("")), "{target}");

    // Real publishes and unmounts: kubelet's histogram fills from the kernel's durations.
    let (volume, a, b) =
        (tree.volume("pv-data"), tree.publish_dir("pod-a", "pv-data"), tree.publish_dir("pod-b", "pv-data"));
    let scratch = tree.volume("pv-scratch");
    let c = tree.publish_dir("pod-a", "pv-scratch");
    for _ in 0..5 {
        assert_eq!(ns.bind(&scratch, &c), Ok(()));
        assert_eq!(ns.umount(&c), Ok(()));
    }
    assert_eq!(ns.bind(&volume, &a), Ok(()));
    let p90 = "histogram_quantile(0.9, sum by (le) (storage_operation_duration_seconds_bucket{operation_name=\"volume_mount\"}))";
    let result = prometheus.query_until(p90, |r| value(r).is_some_and(f64::is_finite));
    assert!(value(&result).unwrap() <= 0.1, "binds take far less than the first bucket: {result:?}");
    let unmounts =
        "sum(storage_operation_duration_seconds_count{operation_name=\"volume_unmount\",status=\"success\"})";
    prometheus.query_until(unmounts, |r| value(r) == Some(5.0));
    // A publish that fails in the kernel (its source is gone) is kubelet's `fail-unknown`,
    // selected as the SLO queries select it.
    let missing = tree.tmp.path().join("no-such-volume");
    assert_eq!(ns.bind(&missing, &c), Err(Errno::ENOENT));
    let failed =
        "sum(storage_operation_duration_seconds_count{operation_name=\"volume_mount\",status=\"fail-unknown\"})";
    prometheus.query_until(failed, |r| value(r) == Some(1.0));
    let plugins = prometheus.query("count by (volume_plugin) (storage_operation_duration_seconds_count)");
    let names: Vec<&str> = plugins.iter().filter_map(|s| s["metric"]["volume_plugin"].as_str()).collect();
    assert!(names.contains(&"kubernetes.io/csi:hostpath.csi.k8s.io"), "the PV's driver names the plugin: {names:?}");

    // The conflict counter rises after a conflicting publish.
    let conflicts = "sum(volguard_conflicts_total{namespace=\"shop\",persistentvolumeclaim=\"data\"})";
    assert_eq!(value(&prometheus.query(conflicts)), None, "no conflict yet");
    match ns.bind(&volume, &b) {
        Err(Errno::EBUSY) => {}
        Ok(()) => {
            agent.wait_for_line("the quarantine", |l| l.contains("CONFLICT quarantined"));
            while ns.umount(&b).is_ok() {}
        }
        other => panic!("pod B's publish: {other:?}"),
    }
    prometheus.query_until(conflicts, |r| value(r) == Some(1.0));
    prometheus.query_until("volguard_single_pod_volumes{state=\"owned\"}", |r| value(r) == Some(1.0));
    prometheus.query_until("volguard_mount_syscalls_total{syscall=\"umount2\",result=\"success\"}", |r| {
        value(r).is_some_and(|v| v >= 5.0)
    });

    // The CSI checks ran against the hung-up socket.
    prometheus.query_until("sum(volguard_csi_findings{severity=\"error\"})", |r| value(r).is_some_and(|v| v >= 1.0));
    prometheus.query_until("volguard_csi_driver_info", |r| !r.is_empty());
    let cli = Command::new(agent_binary()).args(["csi", "--debug-address", &debug]).output().unwrap();
    let table = String::from_utf8_lossy(&cli.stdout);
    assert!(cli.status.success() && table.starts_with("DRIVER") && table.contains("error"), "{table}");

    // The debug API and the CLI see the same state.
    let (status, body) = http_get(&debug, "/debug/volumes/pv-data");
    let volume_json: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((status, volume_json["volume"]["owner"].as_str()), (200, Some("pod-a")), "{body}");
    let cli = Command::new(agent_binary()).args(["conflicts", "--debug-address", &debug]).output().unwrap();
    let table = String::from_utf8_lossy(&cli.stdout);
    assert!(cli.status.success() && table.starts_with("WHEN") && table.contains("shop/db-1"), "{table}");
    let cli = Command::new(agent_binary()).args(["volumes", "--json", "--debug-address", &debug]).output().unwrap();
    let json: Value = serde_json::from_slice(&cli.stdout).expect("`volumes --json` prints JSON");
    let owners: Vec<_> = json["volumes"].as_array().unwrap().iter().filter_map(|v| v["owner"].as_str()).collect();
    assert_eq!(owners, ["pod-a"], "{json}");
    let (status, _) = http_get(&debug, "/debug/mounts?limit=nope");
    assert_eq!(status, 400);

    // Every metric the dashboards name is in the agent's real exposition.
    let (_, exposition) = http_get(&metrics, "/metrics");
    for name in dashboard_metrics() {
        assert!(
            exposition.contains(&format!("# TYPE {name} ")),
            "dashboards use {name}, which the agent does not export"
        );
    }

    agent.stop();
    while ns.umount(&a).is_ok() {}
    if pins.exists() {
        uninstall(&pins);
    }
}

/// Metric family names used by the dashboards' expressions (histogram and counter
/// suffixes folded into the family name as it appears in `# TYPE`).
fn dashboard_metrics() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards");
    let mut names = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with("volguard_") || word.starts_with("storage_operation_duration_seconds") {
                let family = ["_bucket", "_sum", "_count", "_total"]
                    .iter()
                    .find_map(|suffix| word.strip_suffix(suffix))
                    .unwrap_or(word);
                names.insert(family.to_owned());
            }
        }
    }
    names.into_iter().collect()
}

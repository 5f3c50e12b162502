//! Benchmark 3c, run by `cargo xtask bench` (ignored here, needs root): the agent's memory
//! when the cluster holds 100,000 PVs and PVCs and this node's pods use 200 of them. A real
//! `volguard run --kubernetes` (the binary cargo built for this test, or
//! `VOLGUARD_AGENT_BIN`) runs once against an empty fake API server and once against the
//! loaded one; VmRSS is sampled once it has the facts, and one line reports both:
//!
//! `SCALE_RSS idle_kib=… loaded_kib=… pvs=100000 pvcs=100000 used=200 claim_watches=… volume_watches=… connections=…`
//!
//! The agent follows only the claims its pods use, so the 99,800 others must not cost it
//! memory: loaded ≤ idle + 5 MiB. The fake serves TLS with HTTP/2, as a real API server
//! does, so the ~400 watches share one connection (checked).

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{
    fake_api::{CSI_DRIVERS, CSI_NODES, FakeApi, PODS, PVCS, PVS, claim, csi_driver, csi_node, volume},
    have_root,
    kubelet::{Agent, KubeletTree, pin_root},
};

const NODE: &str = "node-1";
const IN_CLUSTER: usize = 100_000;
const PODS_HERE: usize = 20;
const CLAIMS_PER_POD: usize = 10;
const USED_HERE: usize = PODS_HERE * CLAIMS_PER_POD;
/// Pods of other nodes (using other claims), which the node's field selector hides.
const PODS_ELSEWHERE: usize = 500;
const BUDGET_KIB: u64 = 5 * 1024;

fn claim_name(i: usize) -> String {
    format!("c-{i:06}")
}

fn volume_name(i: usize) -> String {
    format!("pv-{i:06}")
}

/// Pod `shop/<name>` on `node` using the claims numbered `claims`.
fn pod(name: &str, node: &str, claims: impl Iterator<Item = usize>) -> Value {
    let volumes: Vec<Value> = claims
        .map(|i| json!({"name": format!("v{i}"), "persistentVolumeClaim": {"claimName": claim_name(i)}}))
        .collect();
    json!({"metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}")},
           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}], "volumes": volumes}})
}

/// 100,000 ReadWriteOncePod PVs and their PVCs; this node's 20 pods use claims 0, 500,
/// 1000, … (200 in all), 500 pods of other nodes use others.
fn load(fake: &FakeApi) {
    fake.preload(PVCS, (0..IN_CLUSTER).map(|i| claim("shop", &claim_name(i), "ReadWriteOncePod", &volume_name(i))));
    fake.preload(PVS, (0..IN_CLUSTER).map(|i| volume(&volume_name(i), "ReadWriteOncePod", "shop", &claim_name(i))));
    let stride = IN_CLUSTER / USED_HERE;
    fake.preload(
        PODS,
        (0..PODS_HERE)
            .map(|p| pod(&format!("here-{p}"), NODE, (0..CLAIMS_PER_POD).map(|k| (p * CLAIMS_PER_POD + k) * stride))),
    );
    fake.preload(
        PODS,
        (0..PODS_ELSEWHERE)
            .map(|p| pod(&format!("elsewhere-{p}"), &format!("node-{}", 2 + p % 50), (0..10).map(|k| p * 10 + k + 1))),
    );
}

fn base(fake: &FakeApi) {
    fake.apply(CSI_DRIVERS, csi_driver("d.example.com"));
    fake.apply(CSI_NODES, csi_node(NODE, &[("d.example.com", "n1")]));
}

/// What one run measured.
struct Measured {
    rss_kib: u64,
    claim_watches: usize,
    volume_watches: usize,
    connections: usize,
}

/// Runs the agent against `fake` until its facts hold `single_pod` volumes (not stale):
/// its VmRSS then (the larger of two samples 1 s apart) and its open watches.
fn measure(fake: &FakeApi, label: &str, single_pod: usize) -> Measured {
    let tree = KubeletTree::new();
    let config = fake.kubeconfig(tree.tmp.path());
    let mountinfo = tree.tmp.path().join("mountinfo");
    std::fs::write(&mountinfo, "").unwrap();
    let pins = pin_root(&format!("scale-{label}"));
    let extra = [
        "--mountinfo",
        mountinfo.to_str().unwrap(),
        "--kubernetes",
        "--node-name",
        NODE,
        "--keep-enforcement-on-exit=false",
    ];
    let agent =
        Agent::start_with_env(&tree.root(), &pins, &[], "auto", &extra, &[("KUBECONFIG", config.to_str().unwrap())]);
    let want = format!("node model: {single_pod} single-pod volumes");
    agent.wait_for_line("the API's facts", |l| l.contains(&want) && !l.contains("STALE"));
    let mut rss_kib = 0;
    for _ in 0..2 {
        std::thread::sleep(Duration::from_secs(1));
        rss_kib = rss_kib.max(agent.rss_kib());
    }
    let measured = Measured {
        rss_kib,
        claim_watches: fake.open_watches(PVCS),
        volume_watches: fake.open_watches(PVS),
        connections: fake.connections(),
    };
    agent.stop();
    measured
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark (root, a few seconds and ~1 GB for the fake): cargo xtask bench runs it"]
async fn agent_rss_with_100000_pvs_and_pvcs_in_the_cluster_and_200_used_on_the_node() {
    if !have_root("agent_rss_with_100000_pvs_and_pvcs_in_the_cluster_and_200_used_on_the_node") {
        return;
    }
    let empty = FakeApi::start_tls().await;
    base(&empty);
    let idle = tokio::task::block_in_place(|| measure(&empty, "idle", 0)).rss_kib;

    let loaded = FakeApi::start_tls().await;
    base(&loaded);
    load(&loaded);
    let m = tokio::task::block_in_place(|| measure(&loaded, "loaded", USED_HERE));
    let rss = m.rss_kib;
    println!(
        "SCALE_RSS idle_kib={idle} loaded_kib={rss} pvs={IN_CLUSTER} pvcs={IN_CLUSTER} used={USED_HERE} \
         claim_watches={} volume_watches={} connections={}",
        m.claim_watches, m.volume_watches, m.connections
    );
    assert_eq!(m.connections, 1, "every watch on one HTTP/2 connection");
    for r in loaded.requests().iter().filter(|r| r.resource == PVS || r.resource == PVCS) {
        assert!(r.field_selector().is_some_and(|f| f.starts_with("metadata.name=")), "an unnarrowed request: {r:?}");
    }
    assert!(
        rss <= idle + BUDGET_KIB,
        "RSS loaded {rss} KiB > idle {idle} KiB + {BUDGET_KIB} KiB ({} KiB more)",
        rss - idle
    );
}

//! `volguard check`: runs every CSI check once and prints a readable report, usable as a
//! node health check (exit status 2 when an error-severity finding exists).

use std::{fmt::Write as _, net::SocketAddr, path::PathBuf, time::Duration};

use tokio::sync::watch;

use crate::{
    enforce::Mode,
    facts::inventory::{self, InventoryError},
    facts::{AccessMode, Facts, Origin, Snapshot},
    model::checks::{Check, Severity},
    model::mounts::Mounts,
    node_files::mount_table::{HOST_MOUNTINFO, MountTable},
    outputs::http::DEFAULT_DEBUG_ADDRESS,
};

use crate::csi::{
    evaluate::{RwopWeakenedBy, VolumeKind, VolumeReport},
    kubelet::KubeletReport,
    report::{self, CheckOptions, CsiReport},
    rules::CsiAccessMode,
};

#[derive(Clone, Debug, clap::Args)]
pub struct CheckArgs {
    /// kubelet's --root-dir.
    #[arg(long, default_value = "/var/lib/kubelet")]
    pub kubelet_root: PathBuf,
    /// Mount table that says which volumes are published into which pods.
    #[arg(long, default_value = HOST_MOUNTINFO)]
    pub mountinfo: PathBuf,
    /// Local inventory (YAML) with the pods, PVs, CSIDrivers and CSINode. Without it or
    /// --kubernetes only the drivers themselves are checked.
    #[arg(long, value_name = "FILE", conflicts_with = "kubernetes")]
    pub inventory: Option<PathBuf>,
    /// Take the facts from the Kubernetes API (in-cluster service account, or KUBECONFIG):
    /// one complete list of this node's pods, PVs, PVCs, CSIDrivers and CSINode, and this
    /// node's Node (for the kubelet's version).
    #[arg(long, requires = "node_name")]
    pub kubernetes: bool,
    /// This node's name, for --kubernetes.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// How long --kubernetes waits for the complete list, in seconds.
    #[arg(long, value_name = "S", default_value_t = 30)]
    pub api_timeout: u64,
    /// A driver socket to ask besides the discovered ones; repeat for more.
    #[arg(long = "csi-socket", value_name = "PATH")]
    pub csi_sockets: Vec<PathBuf>,
    /// Deadline of each call, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    pub deadline_ms: u64,
    /// The volguard mode in force on this node (decides how serious an RWOP volume on a
    /// driver that cannot tell it from RWO is); omitted: the mode of the agent answering
    /// on --debug-address, or, when none answers, no agent enforcing.
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    /// Where the running agent's debug API listens (asked for its mode).
    #[arg(long, default_value = DEFAULT_DEBUG_ADDRESS)]
    pub debug_address: SocketAddr,
    /// Print the report as JSON instead.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Inventory(#[from] InventoryError),
    #[error("the Kubernetes API: {0}")]
    Api(String),
    #[error("reading the mount table {path}: {source}")]
    MountTable {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Runs the checks and prints the report; `Ok(false)` when an error-severity finding exists.
pub async fn run(args: CheckArgs) -> Result<bool, CheckError> {
    // With the facts, why they may lack the kubelet's version.
    let (facts, no_kubelet_version) = match (&args.inventory, &args.node_name) {
        (Some(path), _) => (Some(inventory::load(path)?), "the inventory has no `node: {kubeletVersion: ...}`".into()),
        (None, Some(node_name)) if args.kubernetes => {
            let (facts, why) = api_facts(node_name, Duration::from_secs(args.api_timeout)).await?;
            (Some(facts), why)
        }
        _ => (None, "no facts: --kubernetes reads it from this node's Node".into()),
    };
    let table = MountTable::read(&args.mountinfo)
        .map_err(|source| CheckError::MountTable { path: args.mountinfo.display().to_string(), source })?;
    let mounts = Mounts::from_table(&table, &args.kubelet_root);
    let opts = CheckOptions {
        kubelet_root: args.kubelet_root.clone(),
        extra_sockets: args.csi_sockets.clone(),
        deadline: Duration::from_millis(args.deadline_ms),
    };
    let mode = args.mode.or_else(|| running_agent_mode(args.debug_address));
    let mut report = report::check_node(&opts, facts.as_ref().unwrap_or(&Facts::default()), &mounts, mode).await;
    if facts.is_none() {
        // Nothing is known about CSIDriver objects without a source of facts: saying each
        // driver lacks one would be a guess.
        report.findings.retain(|f| f.check != Check::CsiDriverObjectMissing);
    }
    if facts.as_ref().is_none_or(|f| f.node.is_none()) {
        report.kubelet = KubeletReport::not_known(&no_kubelet_version);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        if facts.is_none() {
            println!("no facts (--inventory or --kubernetes): only the drivers themselves are checked");
        }
        println!("judged for mode {}", mode.map_or("none (no agent answered)".into(), |m| m.to_string()));
        print!("{}", render(&report));
    }
    Ok(!report.findings.iter().any(|f| f.severity == Severity::Error))
}

/// The mode of the agent whose debug API answers at `address`, if one does.
fn running_agent_mode(address: SocketAddr) -> Option<Mode> {
    let status = crate::cli::views::fetch(address, "/debug/status").ok()?;
    <Mode as clap::ValueEnum>::from_str(status["mode"].as_str()?, true).ok()
}

/// One complete list of the facts from the Kubernetes API, through the agent's own
/// watchers (the source stops when the receiver is dropped), then one GET of this node's
/// Node. The Node is only for the kubelet's version: without it the check goes on, and the
/// second value says why the version is missing.
async fn api_facts(node_name: &str, timeout: Duration) -> Result<(Facts, String), CheckError> {
    let config = kube::Config::infer().await.map_err(|e| CheckError::Api(e.to_string()))?;
    let client = crate::facts::k8s::client::http2_client(config).map_err(|e| CheckError::Api(e.to_string()))?;
    let mut facts = listed_facts(client.clone(), node_name, timeout).await?;
    let why = match tokio::time::timeout(timeout, crate::facts::k8s::node::get(client, node_name)).await {
        Ok(Ok(Some(node))) => {
            facts.node = Some(node);
            String::new()
        }
        Ok(Ok(None)) => format!("the API has no Node {node_name}"),
        Ok(Err(e)) => format!("reading Node {node_name}: {e}"),
        Err(_) => format!("reading Node {node_name}: no answer within {} s", timeout.as_secs()),
    };
    Ok((facts, why))
}

async fn listed_facts(client: kube::Client, node_name: &str, timeout: Duration) -> Result<Facts, CheckError> {
    let (tx, mut rx) = watch::channel(Snapshot::empty(Origin::KubernetesApi));
    let source = tokio::spawn(crate::facts::k8s::source::run(client, node_name.to_owned(), tx));
    let complete = async {
        loop {
            {
                let snapshot = rx.borrow_and_update();
                if snapshot.synced_at.is_some() && snapshot.stale.is_none() {
                    return Ok(Facts::clone(&snapshot.facts));
                }
            }
            if rx.changed().await.is_err() {
                return Err(CheckError::Api("the API source stopped before a complete list".into()));
            }
        }
    };
    let result = tokio::time::timeout(timeout, complete).await.unwrap_or_else(|_| {
        let why = rx.borrow().stale.clone().unwrap_or_else(|| "no answer".into());
        Err(CheckError::Api(format!("no complete list within {} s: {why}", timeout.as_secs())))
    });
    source.abort();
    result
}

fn is_rwop(v: &VolumeReport) -> bool {
    v.access_modes.first() == Some(&AccessMode::ReadWriteOncePod)
}

fn kubelet_refuses(report: &CsiReport) -> &'static str {
    match report.kubelet.rwop.refuses_second_pod() {
        Some(true) => "kubelet refuses a second pod itself",
        Some(false) => "kubelet does not refuse a second pod itself",
        None => "whether kubelet refuses a second pod itself is unknown",
    }
}

/// The ReadWriteOncePod volumes in use, counted by why the driver is not told
/// SINGLE_NODE_SINGLE_WRITER; `None` when there are none.
fn rwop_summary(report: &CsiReport) -> Option<String> {
    let rwop: Vec<_> = report.volumes.iter().filter(|v| is_rwop(v)).collect();
    if rwop.is_empty() {
        return None;
    }
    let by = |cause| rwop.iter().filter(|v| v.rwop_weakened_by == Some(cause)).count();
    Some(format!(
        "ReadWriteOncePod volumes in use: {}; told SINGLE_NODE_WRITER because of the driver's capabilities: {}; told \
         UNKNOWN because of the kubelet's version: {}; {}",
        rwop.len(),
        by(RwopWeakenedBy::DriverCapabilities),
        by(RwopWeakenedBy::KubeletVersion),
        kubelet_refuses(report),
    ))
}

/// What one ReadWriteOncePod volume's driver is told and why, and what kubelet does.
fn rwop_line(report: &CsiReport, v: &VolumeReport) -> String {
    let told = match (v.csi_access_mode, v.rwop_weakened_by) {
        (None, _) => "what the driver is told is unknown (its node capabilities are)".to_owned(),
        (Some(_), Some(RwopWeakenedBy::DriverCapabilities)) => {
            "the driver is told SINGLE_NODE_WRITER because of the driver's capabilities (no SINGLE_NODE_MULTI_WRITER)"
                .to_owned()
        }
        (Some(_), Some(RwopWeakenedBy::KubeletVersion)) => {
            format!("the driver is told UNKNOWN because of the kubelet's version ({})", report.kubelet.name())
        }
        (Some(mode), None) => format!("the driver is told {}", access_mode_name(mode)),
    };
    format!("{told}; {}", kubelet_refuses(report))
}

fn access_mode_name(mode: CsiAccessMode) -> String {
    serde_json::to_string(&mode).unwrap_or_default().replace('"', "")
}

/// The human-readable report: drivers, volumes, then findings by severity (worst first).
pub fn render(report: &CsiReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", report.kubelet.summary);
    if let Some(summary) = rwop_summary(report) {
        let _ = writeln!(out, "{summary}");
    }
    if report.drivers.is_empty() {
        out.push_str("no CSI drivers found on this node\n");
    }
    for d in &report.drivers {
        let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "?".into());
        let found: Vec<&str> = d.found_by.iter().map(|s| s.describe()).collect();
        let _ = writeln!(
            out,
            "driver {}: endpoint {} (found by {})",
            d.name,
            d.endpoint.as_deref().map_or("?".into(), |e| e.display().to_string()),
            found.join(", ")
        );
        let _ = writeln!(
            out,
            "  plugin {} {}, ready {}, node id {}, max volumes {}",
            opt(&d.plugin_name),
            opt(&d.vendor_version),
            d.ready.map_or("?", |r| if r { "yes" } else { "no" }),
            opt(&d.node_id),
            d.max_volumes_per_node.map_or("?".into(), |m| m.to_string()),
        );
        let caps = d.node_capabilities.as_ref().map_or("?".into(), |c| {
            c.iter()
                .map(|c| serde_json::to_string(c).unwrap_or_default().replace('"', ""))
                .collect::<Vec<_>>()
                .join(", ")
        });
        let _ = writeln!(
            out,
            "  node capabilities [{caps}], CSIDriver {}, fsGroupPolicy {}, lifecycle modes {}",
            if d.csi_driver_object { "present" } else { "missing" },
            d.fs_group_policy,
            d.volume_lifecycle_modes.join(",")
        );
    }
    for v in &report.volumes {
        let kind = match v.kind {
            VolumeKind::Persistent => "persistent",
            VolumeKind::Inline => "inline",
        };
        let access = v.csi_access_mode.map_or("?".into(), access_mode_name);
        let _ = writeln!(
            out,
            "volume {} ({kind}, driver {}, {} {} pod(s)): CSI access mode {access}; fsGroup: {}",
            v.name,
            v.driver,
            if v.published { "published into" } else { "used by" },
            v.pods.len(),
            v.fs_group_reason
        );
        if is_rwop(v) {
            let _ = writeln!(out, "  ReadWriteOncePod: {}", rwop_line(report, v));
        }
    }
    for (severity, title) in [(Severity::Error, "errors"), (Severity::Warning, "warnings"), (Severity::Info, "info")] {
        let findings: Vec<_> = report.findings.iter().filter(|f| f.severity == severity).collect();
        if findings.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{title} ({}):", findings.len());
        for f in findings {
            let check = serde_json::to_string(&f.check).unwrap_or_default().replace('"', "");
            let _ = writeln!(out, "  [{check}] {}: {}", f.subject, f.message);
        }
    }
    if report.findings.is_empty() {
        out.push_str("no findings\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        csi::{client::NodeCapability, discovery::Source},
        facts::{NodeInfo, fixtures},
        node_files::mount_table::MountTable,
    };

    /// A ReadWriteOncePod volume and a ReadWriteOnce one on a driver without
    /// SINGLE_NODE_MULTI_WRITER, published into pods, with kubelet `version`.
    fn report(version: &str, caps: &[NodeCapability]) -> CsiReport {
        let pv = |name, mode| fixtures::pv(name, &[mode]).on_driver("d.csi.io", Some("ext4"));
        let facts = Facts {
            persistent_volumes: vec![pv("pv-a", AccessMode::ReadWriteOncePod), pv("pv-b", AccessMode::ReadWriteOnce)],
            node: Some(NodeInfo { kubelet_version: version.into() }),
            ..Facts::default()
        };
        let table = "10 1 8:1 / /k/pods/p1/volumes/kubernetes.io~csi/pv-a/mount rw - ext4 x rw\n\
                     11 1 8:1 / /k/pods/p2/volumes/kubernetes.io~csi/pv-b/mount rw - ext4 x rw\n";
        let mounts = Mounts::from_table(&MountTable::parse(table.as_bytes()), std::path::Path::new("/k"));
        let driver = report::DriverReport {
            name: "d.csi.io".into(),
            found_by: [Source::Explicit].into(),
            plugin_name: Some("d.csi.io".into()),
            node_capabilities: Some(caps.to_vec()),
            ..report::DriverReport::default()
        };
        CsiReport::judge(vec![driver], &facts, &mounts, Some(Mode::Audit))
    }

    #[test]
    fn the_text_report_says_what_the_kubelet_and_the_driver_do_with_rwop() {
        let text = render(&report("v1.26.15", &[]));
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("kubelet v1.26.15: ReadWriteOncePod feature gate alpha, off by default"),
            "{text}"
        );
        assert_eq!(
            lines[1],
            "ReadWriteOncePod volumes in use: 1; told SINGLE_NODE_WRITER because of the driver's capabilities: 1; told \
             UNKNOWN because of the kubelet's version: 0; kubelet does not refuse a second pod itself"
        );
        let rwop: Vec<&str> = lines.iter().filter(|l| l.starts_with("  ReadWriteOncePod: ")).copied().collect();
        assert_eq!(
            rwop,
            ["  ReadWriteOncePod: the driver is told SINGLE_NODE_WRITER because of the driver's capabilities (no \
              SINGLE_NODE_MULTI_WRITER); kubelet does not refuse a second pod itself"],
            "one line, for the ReadWriteOncePod volume only:\n{text}"
        );
        assert!(text.contains("[kubelet_rwop_not_enforced] volume pv-a: "), "{text}");

        let old = render(&report("v1.21.14", &[NodeCapability::SingleNodeMultiWriter]));
        assert!(
            old.contains(
                "  ReadWriteOncePod: the driver is told UNKNOWN because of the kubelet's version (v1.21.14); kubelet \
                 does not refuse a second pod itself"
            ),
            "{old}"
        );
        let new = render(&report("v1.31.2", &[NodeCapability::SingleNodeMultiWriter]));
        assert!(
            new.contains(
                "  ReadWriteOncePod: the driver is told SINGLE_NODE_SINGLE_WRITER; kubelet refuses a second pod itself"
            ),
            "{new}"
        );
        assert!(!new.contains("kubelet_rwop_not_enforced"), "{new}");
    }
}

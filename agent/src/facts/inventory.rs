//! The local inventory file: the same facts as the Kubernetes API, in YAML, for a bare
//! host, the demo and tests. Read at start-up (a bad file stops the start with the line
//! and field at fault) and re-read when it changes; a bad edit is reported and the last
//! good inventory stays in force, marked stale until the file is good again.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, SystemTime},
};

use tokio::sync::watch;
use tracing::{info, warn};

use crate::facts::{Facts, Origin, Snapshot};

/// Why an inventory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("reading inventory {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A YAML or schema error, with where it is.
    #[error("inventory {path}: {}{field}: {reason}", line.map(|(l, c)| format!("line {l}, column {c}: ")).unwrap_or_default())]
    Invalid { path: String, line: Option<(usize, usize)>, field: String, reason: String },
}

/// Parses an inventory. `path` only names the file in errors.
pub fn parse(path: &Path, text: &str) -> Result<Facts, InventoryError> {
    let invalid = |line, field: String, reason: String| InventoryError::Invalid {
        path: path.display().to_string(),
        line,
        field,
        reason,
    };
    if text.trim().is_empty() {
        return Ok(Facts::default());
    }
    let deserializer = serde_yaml_ng::Deserializer::from_str(text);
    let facts: Facts = serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let field = match e.path().to_string() {
            p if p == "." => "(top level)".to_owned(),
            p => p,
        };
        let inner = e.inner();
        let line = inner.location().map(|l| (l.line(), l.column()));
        // serde_yaml_ng appends " at line L column C"; the location is reported separately.
        let reason = inner.to_string();
        let reason = reason.split(" at line ").next().unwrap_or(&reason);
        // ... and sometimes starts with its own (shorter) path: keep one path, ours.
        let reason = match reason.split_once(": ") {
            Some((head, rest)) if field.starts_with(head) => rest,
            _ => reason,
        }
        .to_owned();
        invalid(line, field, reason)
    })?;
    check_unique(&facts).map_err(|(field, reason)| invalid(None, field, reason))?;
    Ok(facts)
}

/// Duplicate keys would make "which one is in force" a guess: refuse them.
fn check_unique(facts: &Facts) -> Result<(), (String, String)> {
    fn first_duplicate(keys: impl Iterator<Item = String>) -> Option<(usize, String)> {
        let mut seen = std::collections::HashSet::new();
        keys.enumerate().find(|(_, k)| !seen.insert(k.clone()))
    }
    let checks: [(&str, Option<(usize, String)>); 4] = [
        ("pods", first_duplicate(facts.pods.iter().map(|p| p.uid.clone()))),
        ("persistentVolumes", first_duplicate(facts.persistent_volumes.iter().map(|p| p.name.clone()))),
        (
            "persistentVolumeClaims",
            first_duplicate(facts.persistent_volume_claims.iter().map(|c| c.claim_ref().to_string())),
        ),
        ("csiDrivers", first_duplicate(facts.csi_drivers.iter().map(|d| d.name.clone()))),
    ];
    for (list, duplicate) in checks {
        if let Some((index, key)) = duplicate {
            return Err((format!("{list}[{index}]"), format!("duplicate entry {key:?}")));
        }
    }
    Ok(())
}

/// Reads and parses the file.
pub fn load(path: &Path) -> Result<Facts, InventoryError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| InventoryError::Read { path: path.display().to_string(), source })?;
    parse(path, &text)
}

/// How often the file is checked for changes.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Watches an inventory file already loaded once (`initial`), publishing each good
/// version and marking the last good one stale while the file is bad or missing.
pub struct InventoryWatch {
    path: PathBuf,
    /// What the file held when last read (its digest: the text of a big inventory would
    /// stay in memory for nothing).
    last_read: Option<Digest>,
    current: Snapshot,
}

/// A file's length and SipHash: equal for equal texts, and for different ones as good as
/// never.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Digest(usize, u64);

impl Digest {
    fn of(text: &str) -> Self {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut hasher);
        Self(text.len(), hasher.finish())
    }
}

impl InventoryWatch {
    pub fn new(path: PathBuf, initial: Facts) -> Self {
        let origin = Origin::Inventory { path: path.display().to_string() };
        let last_read = std::fs::read_to_string(&path).ok().map(|text| Digest::of(&text));
        let current = Snapshot { facts: Arc::new(initial), origin, stale: None, synced_at: Some(SystemTime::now()) };
        Self { path, last_read, current }
    }

    pub fn snapshot(&self) -> &Snapshot {
        &self.current
    }

    /// Re-reads the file; returns the new snapshot when anything changed.
    pub fn poll(&mut self) -> Option<&Snapshot> {
        let result = std::fs::read_to_string(&self.path);
        if let Ok(text) = &result
            && self.last_read == Some(Digest::of(text))
        {
            return None;
        }
        let outcome = result
            .map_err(|source| InventoryError::Read { path: self.path.display().to_string(), source })
            .and_then(|text| {
                self.last_read = Some(Digest::of(&text));
                parse(&self.path, &text)
            });
        // The parse's transient memory is many times the file's size (50 MiB for a 2.8 MB
        // file of 10,000 volumes): give it back rather than keep it for ever.
        crate::sys::heap::return_free_memory();
        match outcome {
            Ok(facts) => {
                info!("inventory {} reloaded: {}", self.path.display(), summary(&facts));
                self.current.facts = Arc::new(facts);
                self.current.stale = None;
                self.current.synced_at = Some(SystemTime::now());
            }
            Err(e) => {
                let why = format!("{e}; the last good inventory stays in force");
                if self.current.stale.as_deref() == Some(&why) {
                    return None;
                }
                warn!("{why}");
                // A missing file forgets what was read, so the same content coming back counts
                // as a change and clears the stale mark.
                if matches!(e, InventoryError::Read { .. }) {
                    self.last_read = None;
                }
                self.current.stale = Some(why);
            }
        }
        Some(&self.current)
    }

    /// Polls forever, publishing changes into `tx`. Reading and parsing a big file is
    /// CPU work: on the blocking pool, so no runtime worker (nor the timers and sockets
    /// they drive) waits for it.
    pub async fn run(mut self, tx: watch::Sender<Snapshot>) {
        let mut tick = tokio::time::interval(POLL_INTERVAL);
        loop {
            tick.tick().await;
            let polled = crate::sys::background::spawn(move || {
                let changed = self.poll().cloned();
                (self, changed)
            });
            let Ok((watch, changed)) = polled.await else { return };
            self = watch;
            if let Some(snapshot) = changed
                && tx.send(snapshot).is_err()
            {
                return;
            }
        }
    }
}

/// One line: how many of each object.
pub fn summary(facts: &Facts) -> String {
    format!(
        "{} pods, {} PVs ({} single-pod), {} PVCs, {} CSI drivers, CSINode {}",
        facts.pods.len(),
        facts.persistent_volumes.len(),
        facts.single_pod_volumes().len(),
        facts.persistent_volume_claims.len(),
        facts.csi_drivers.len(),
        if facts.csi_node.is_some() { "present" } else { "absent" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::{AccessMode, SinglePodReason, VolumeSource};

    const GOOD: &str = "\
# A bare host with one RWOP volume used by one pod.
nodeName: demo-node
pods:
  - uid: 6f1c2d7e-0000-4000-8000-00000000000a
    namespace: shop
    name: db-0
    volumes:
      - name: data
        persistentVolumeClaim: data-db-0
      - name: scratch
        ephemeral: {}
      - name: secrets
        csi: {driver: secrets-store.csi.k8s.io}
      - name: config
        other: {}
persistentVolumes:
  - name: pv-data
    accessModes: [ReadWriteOncePod]
    csi: {driver: hostpath.csi.k8s.io, volumeHandle: h-1, fsType: ext4}
    claimRef: shop/data-db-0
persistentVolumeClaims:
  - namespace: shop
    name: data-db-0
    accessModes: [ReadWriteOncePod]
    volumeName: pv-data
csiDrivers:
  - name: hostpath.csi.k8s.io
    volumeLifecycleModes: [Persistent, Ephemeral]
    fsGroupPolicy: File
csiNode:
  drivers:
    - name: hostpath.csi.k8s.io
      nodeID: demo-node
      allocatableCount: 100
node:
  kubeletVersion: v1.30.4
";

    fn error(text: &str) -> String {
        parse(Path::new("inv.yaml"), text).unwrap_err().to_string()
    }

    #[test]
    fn a_complete_inventory_parses() {
        let facts = parse(Path::new("inv.yaml"), GOOD).unwrap();
        assert_eq!(facts.node_name.as_deref(), Some("demo-node"));
        let pod = &facts.pods[0];
        assert_eq!(pod.volumes[0].source, VolumeSource::PersistentVolumeClaim("data-db-0".into()));
        assert_eq!(pod.volumes[1].source, VolumeSource::Ephemeral);
        assert_eq!(pod.volumes[2].source, VolumeSource::Csi { driver: "secrets-store.csi.k8s.io".into() });
        assert_eq!(pod.volumes[3].source, VolumeSource::Other);
        assert_eq!(facts.persistent_volumes[0].access_modes, [AccessMode::ReadWriteOncePod]);
        assert_eq!(facts.persistent_volumes[0].claim_ref.as_ref().unwrap().to_string(), "shop/data-db-0");
        assert_eq!(facts.csi_node.as_ref().unwrap().drivers[0].allocatable_count, Some(100));
        assert_eq!(facts.single_pod_volumes().get("pv-data"), Some(&SinglePodReason::ReadWriteOncePod));
        assert!(facts.csi_drivers[0].attach_required, "the API default");
        assert_eq!(facts.node.unwrap().kubelet_version, "v1.30.4");
    }

    #[test]
    fn the_documented_example_parses_and_means_what_its_comments_say() {
        let text = include_str!("../../../deploy/inventory.example.yaml");
        let facts = parse(Path::new("inventory.example.yaml"), text).unwrap();
        let single = facts.single_pod_volumes();
        assert_eq!(single.get("pvc-5d1e7c2a"), Some(&SinglePodReason::ReadWriteOncePod));
        assert_eq!(single.get("pvc-9a8b7c6d"), Some(&SinglePodReason::Annotated));
        assert_eq!(facts.csi_drivers[0].fs_group_policy, "File");
        assert_eq!(facts.node.map(|n| n.kubelet_version).as_deref(), Some("v1.34.4"));
    }

    #[test]
    fn empty_files_are_empty_inventories() {
        assert_eq!(parse(Path::new("x"), "").unwrap(), Facts::default());
        assert_eq!(parse(Path::new("x"), "# nothing yet\n").unwrap(), Facts::default());
    }

    #[test]
    fn errors_name_the_line_and_the_field() {
        let typo = GOOD.replace("persistentVolumeClaim: data-db-0", "persistentVolumeClam: data-db-0");
        let e = error(&typo);
        assert!(
            e.starts_with(
                "inventory inv.yaml: line 9, column 9: pods[0].volumes[0].persistentVolumeClam: unknown field"
            ),
            "{e}"
        );
        assert!(e.contains("unknown field `persistentVolumeClam`"), "{e}");

        let two = GOOD.replace("ephemeral: {}", "ephemeral: {}\n        other: {}");
        let e = error(&two);
        assert!(e.contains("pods[0].volumes[1]") && e.contains("exactly one of") && e.contains("found 2"), "{e}");

        let mode = GOOD.replace("accessModes: [ReadWriteOncePod]\n    csi", "accessModes: [ReadWriteOnePod]\n    csi");
        let e = error(&mode);
        assert!(e.contains("line 18") && e.contains("persistentVolumes[0].accessModes[0]"), "{e}");
        assert!(e.contains("unknown variant `ReadWriteOnePod`"), "{e}");

        let claim = GOOD.replace("claimRef: shop/data-db-0", "claimRef: data-db-0");
        let e = error(&claim);
        assert!(e.contains("persistentVolumes[0].claimRef") && e.contains("not <namespace>/<name>"), "{e}");

        let e = error("pods:\n  - uid: a\n    namespace: n\n");
        assert!(e.contains("line 2") && e.contains("pods[0]") && e.contains("missing field `name`"), "{e}");

        let e = error("pods: {}\n");
        assert!(e.contains("line 1") && e.contains("pods") && e.contains("expected a sequence"), "{e}");
        let e = error(&GOOD.replace("kubeletVersion:", "kubletVersion:"));
        assert!(e.contains("node.kubletVersion") && e.contains("unknown field"), "{e}");
    }

    #[test]
    fn duplicates_are_refused() {
        let twice = "persistentVolumes:\n  - name: a\n  - name: b\n  - name: a\n";
        assert_eq!(error(twice), "inventory inv.yaml: persistentVolumes[2]: duplicate entry \"a\"");
    }

    #[test]
    fn not_yaml_at_all_is_an_error_not_a_panic() {
        for text in ["\u{0}\u{1}garbage: [", "- just\n- a list\n", "key: value: other", "\t\tx"] {
            assert!(parse(Path::new("x"), text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn a_bad_edit_keeps_the_last_good_inventory_and_marks_it_stale() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inventory.yaml");
        std::fs::write(&path, GOOD).unwrap();
        let mut watch = InventoryWatch::new(path.clone(), load(&path).unwrap());
        assert!(watch.poll().is_none(), "unchanged");

        std::fs::write(&path, GOOD.replace("ReadWriteOncePod]\n    csi", "Bogus]\n    csi")).unwrap();
        let stale = watch.poll().expect("a change").clone();
        assert!(stale.stale.as_deref().unwrap().contains("persistentVolumes[0].accessModes[0]"));
        assert!(stale.facts.single_pod_volumes().contains_key("pv-data"), "the last good facts stay");
        assert!(watch.poll().is_none(), "the same bad file is reported once");

        std::fs::remove_file(&path).unwrap();
        assert!(watch.poll().unwrap().stale.as_deref().unwrap().contains("reading inventory"));

        std::fs::write(&path, GOOD.replace("pv-data", "pv-other")).unwrap();
        let good = watch.poll().expect("a change").clone();
        assert_eq!(good.stale, None);
        assert!(good.facts.single_pod_volumes().contains_key("pv-other"));
    }

    proptest::proptest! {
        /// Any text is an inventory or an error with a place, never a panic.
        #[test]
        fn any_text_parses_or_fails_cleanly(text in "\\PC{0,256}") {
            let _ = parse(Path::new("fuzz.yaml"), &text);
        }

        /// YAML-shaped noise around the real keys.
        #[test]
        fn yaml_shaped_noise_fails_cleanly(
            key in "(pods|persistentVolumes|persistentVolumeClaims|csiDrivers|csiNode|nodeName|x)",
            value in "(\\[\\]|\\{\\}|-1|~|\"\"|\\[\\{uid: 1\\}\\]|\\{drivers: 3\\}|'a: b')",
        ) {
            let _ = parse(Path::new("fuzz.yaml"), &format!("{key}: {value}\n"));
        }
    }
}

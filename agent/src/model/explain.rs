//! Telling the refused pod why: what a refused, quarantined or audited publish says to the
//! pod's owner (a Kubernetes Event where there is an API, a log line everywhere), and the
//! limiter that keeps a pod retrying every few seconds from flooding either.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use std::path::PathBuf;

use super::access::Route;
use crate::facts::{ClaimRef, Facts};

/// What the agent did about a publish of a single-pod volume into a second pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConflictAction {
    /// Refused in the kernel (BPF LSM): nothing was mounted.
    Refused,
    /// Mounted, then detached at once and the target masked (no BPF LSM).
    Quarantined,
    /// Mounted and left alone (audit mode).
    Audited,
    /// Found already published into two pods (at start-up, or after a time no agent
    /// ran): nothing was done, a running pod's mount is never torn down.
    Observed,
    /// Not a conflict but its sequel: the owner released the volume while this pod's
    /// publish stays quarantined.
    Released,
    /// A mount outside kubelet's publish reached the volume's data and was detached at once.
    Detached,
}

impl ConflictAction {
    /// The Event's `reason`: stable, CamelCase, what `kubectl get events` filters on.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Refused => "SinglePodVolumeRefused",
            Self::Quarantined => "SinglePodVolumeQuarantined",
            Self::Audited => "SinglePodVolumeInUse",
            Self::Observed => "SinglePodVolumeShared",
            Self::Released => "SinglePodVolumeReleased",
            Self::Detached => "SinglePodVolumeAccessDetached",
        }
    }

    /// The `action` label of `volguard_conflicts_total`; `None` for what is not a conflict.
    pub fn metric_label(self) -> Option<&'static str> {
        match self {
            Self::Refused => Some("blocked"),
            Self::Quarantined => Some("quarantined"),
            Self::Detached => Some("detached"),
            Self::Audited | Self::Observed => Some("observed"),
            Self::Released => None,
        }
    }
}

/// A pod as far as the facts know it: the UID always, the name when the facts have it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct PodRef {
    pub uid: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

impl PodRef {
    pub fn resolve(facts: &Facts, uid: &str) -> Self {
        let pod = facts.pod(uid);
        Self { uid: uid.to_owned(), namespace: pod.map(|p| p.namespace.clone()), name: pod.map(|p| p.name.clone()) }
    }
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.namespace, &self.name) {
            (Some(ns), Some(name)) => write!(f, "{ns}/{name} (uid {})", self.uid),
            _ => write!(f, "uid {}", self.uid),
        }
    }
}

/// Who made a mount: the calling process and, where its cgroup says, its pod (a CSI
/// driver's, when the driver publishes; kubelet runs outside pods).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MountedBy {
    pub pid: u32,
    pub command: String,
    pub pod: Option<PodRef>,
}

impl MountedBy {
    pub fn resolve(facts: &Facts, pid: u32, command: &str, pod_uid: Option<&str>) -> Self {
        Self { pid, command: command.to_owned(), pod: pod_uid.map(|uid| PodRef::resolve(facts, uid)) }
    }
}

impl std::fmt::Display for MountedBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} ({})", self.pid, self.command)?;
        match &self.pod {
            Some(pod) => write!(f, " in pod {pod}"),
            None => Ok(()),
        }
    }
}

/// One conflicting publish, with everything the Event names.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Conflict {
    pub action: ConflictAction,
    /// The volume's spec name (the PV name).
    pub volume: String,
    pub claim: Option<ClaimRef>,
    /// The pod whose publish was refused.
    pub pod: PodRef,
    /// The pod that holds the volume.
    pub owner: PodRef,
    /// Who made the mount, when an event says (not for a conflict found in the table).
    pub by: Option<MountedBy>,
    /// How the pod reached the volume: kubelet's publish, or a mount outside it.
    pub route: Route,
    /// For a mount outside kubelet's publish: where it was, in its mount namespace.
    pub mount_point: Option<PathBuf>,
}

impl Conflict {
    pub fn resolve(facts: &Facts, action: ConflictAction, volume: &str, pod_uid: &str, owner_uid: &str) -> Self {
        Self {
            action,
            volume: volume.to_owned(),
            claim: facts.claim_of(volume),
            pod: PodRef::resolve(facts, pod_uid),
            owner: PodRef::resolve(facts, owner_uid),
            by: None,
            route: Route::Publish,
            mount_point: None,
        }
    }

    /// The same conflict, reached by `route` (through the mount at `mount_point`, for a
    /// mount outside kubelet's publish).
    pub fn routed(self, route: Route, mount_point: Option<PathBuf>) -> Self {
        Self { route, mount_point, ..self }
    }

    /// The same conflict, naming who made the mount.
    pub fn made_by(self, by: Option<MountedBy>) -> Self {
        Self { by, ..self }
    }

    /// The Event's reason: the action's, except that a refused open names the access.
    pub fn reason(&self) -> &'static str {
        match (self.action, self.route) {
            (ConflictAction::Refused, Route::Open | Route::Change) => "SinglePodVolumeAccessRefused",
            (action, _) => action.reason(),
        }
    }

    /// The Event's message: what happened, to which volume and PVC, who holds it, and
    /// what becomes of this pod (which differs by mode).
    pub fn message(&self) -> String {
        match &self.by {
            Some(by) if self.route == Route::Open => format!("{} The file was opened by {by}.", self.what_happened()),
            Some(by) if self.route == Route::Change => {
                format!("{} The change was tried by {by}.", self.what_happened())
            }
            Some(by) => format!("{} The mount was made by {by}.", self.what_happened()),
            None => self.what_happened(),
        }
    }

    fn what_happened(&self) -> String {
        let claim = match &self.claim {
            Some(c) => format!(" (PVC {c})"),
            None => String::new(),
        };
        let (volume, owner) = (&self.volume, &self.owner);
        let in_use = format!("volume \"{volume}\"{claim} is single-pod and already in use by pod {owner} on this node");
        if self.route == Route::Open {
            let outside = "its files outside kubelet's publish";
            return match self.action {
                ConflictAction::Refused => format!(
                    "{in_use}; a process of this pod tried to open {outside}, and the open was refused (EACCES from \
                     BPF LSM, or EPERM with --deny-foreign-open on a node without it)."
                ),
                _ => format!(
                    "{in_use}; a process of this pod opened {outside}. volguard reported it and refused nothing \
                     (audit mode, or a node without BPF LSM where --deny-foreign-open is off)."
                ),
            };
        }
        if self.route == Route::Change {
            return match self.action {
                ConflictAction::Refused => format!(
                    "{in_use}; a process of this pod tried to change the volume's files or names (unlink, rename, \
                     link, create, truncate, chmod, chown, an extended attribute) or to take an open file of it from \
                     another process (pidfd_getfd, SCM_RIGHTS), and the kernel refused it (EACCES)."
                ),
                _ => format!(
                    "{in_use}; a process of this pod changed the volume's files or names, or took an open file of it. volguard reported it and \
                     refused nothing (audit mode)."
                ),
            };
        }
        if let (Some(mount_point), Route::Ancestor) = (&self.mount_point, self.route) {
            return format!(
                "{in_use}; a mount of a directory above it (at {} in the mount's namespace) shows its files. volguard \
                 left that mount in place (it shows much else); without BPF LSM the opens of the volume's files through \
                 it are reported, and refused only with --deny-foreign-open.",
                mount_point.display()
            );
        }
        if let Some(mount_point) = &self.mount_point {
            let reached = format!(
                "{in_use}; a mount outside kubelet's publish ({}, at {} in the mount's namespace) reached its data",
                self.route.label(),
                mount_point.display()
            );
            return match self.action {
                ConflictAction::Detached => format!("{reached}. volguard detached that mount."),
                _ => format!(
                    "{reached}. volguard left it in place (audit mode, or a node process without --detach-node-access)."
                ),
            };
        }
        match self.action {
            ConflictAction::Refused => format!(
                "{in_use}; this pod's mount was refused in the kernel. kubelet retries it: the pod starts, with the \
                 volume, once that pod releases it."
            ),
            ConflictAction::Quarantined => format!(
                "{in_use}; this pod's mount was detached right after it was mounted and its target covered with an \
                 empty read-only placeholder. The pod runs without the volume and does not get it when that pod \
                 releases it: delete this pod then, and its replacement mounts the volume."
            ),
            ConflictAction::Audited => {
                format!("{in_use}; this pod's mount was allowed (audit mode): both pods now use the volume.")
            }
            ConflictAction::Observed => format!(
                "{in_use}; this pod already had it mounted when volguard started (or while no agent ran). volguard \
                 does not take a running pod's volume away: delete one of the two pods."
            ),
            ConflictAction::Detached => format!("{in_use}; this pod's mount of it was detached."),
            ConflictAction::Released => format!(
                "volume \"{volume}\"{claim} is free: pod {owner} released it. This pod still has volguard's empty \
                 read-only placeholder instead of the volume: delete it, and its replacement mounts the volume."
            ),
        }
    }
}

/// One Event per (pod, volume, action, route) per this window.
pub const EVENT_WINDOW: Duration = Duration::from_secs(60);
/// How many (pod, volume, action, route) keys the limiter remembers.
pub const EVENT_KEYS: usize = 4096;

/// Lets the first report of a (pod, volume, action, route) through, then at most one per
/// `window`, counting the ones held back so the next report can say how many.
#[derive(Debug)]
pub struct RateLimiter {
    window: Duration,
    capacity: usize,
    seen: HashMap<(String, String, ConflictAction, Route), LastSent>,
}

#[derive(Debug)]
struct LastSent {
    last_sent: Instant,
    held_back: u64,
}

/// What the limiter says about one report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Send it; `held_back` reports of the same conflict were suppressed since the last one.
    Send {
        held_back: u64,
    },
    Suppress,
}

impl RateLimiter {
    /// `capacity` bounds memory: beyond it the oldest keys are forgotten.
    pub fn new(window: Duration, capacity: usize) -> Self {
        Self { window, capacity: capacity.max(1), seen: HashMap::new() }
    }

    pub fn check(&mut self, conflict: &Conflict, now: Instant) -> Verdict {
        // The route too: a pod's mount above a volume and its opens through that mount are
        // two facts, each worth its Event.
        let key = (conflict.pod.uid.clone(), conflict.volume.clone(), conflict.action, conflict.route);
        if let Some(seen) = self.seen.get_mut(&key) {
            if now.duration_since(seen.last_sent) < self.window {
                seen.held_back += 1;
                return Verdict::Suppress;
            }
            let held_back = std::mem::take(&mut seen.held_back);
            seen.last_sent = now;
            return Verdict::Send { held_back };
        }
        if self.seen.len() >= self.capacity {
            self.forget_oldest();
        }
        self.seen.insert(key, LastSent { last_sent: now, held_back: 0 });
        Verdict::Send { held_back: 0 }
    }

    fn forget_oldest(&mut self) {
        if let Some(oldest) = self.seen.iter().min_by_key(|(_, s)| s.last_sent).map(|(k, _)| k.clone()) {
            self.seen.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::fixtures::sample_facts;

    fn facts() -> Facts {
        sample_facts()
    }

    #[test]
    fn the_message_names_volume_claim_and_owner() {
        let c = Conflict::resolve(&facts(), ConflictAction::Refused, "pv-1", "uid-b", "uid-a");
        assert_eq!(c.pod.name.as_deref(), Some("db-1"));
        assert_eq!(
            c.message(),
            "volume \"pv-1\" (PVC shop/data) is single-pod and already in use by pod shop/db-0 (uid uid-a) on this \
             node; this pod's mount was refused in the kernel. kubelet retries it: the pod starts, with the volume, \
             once that pod releases it."
        );
        assert_eq!(c.action.reason(), "SinglePodVolumeRefused");
    }

    #[test]
    fn a_refused_change_is_an_access_refused_and_says_so() {
        let change = |action| Conflict::resolve(&facts(), action, "pv-1", "uid-b", "uid-a").routed(Route::Change, None);
        let refused = change(ConflictAction::Refused);
        assert_eq!(refused.reason(), "SinglePodVolumeAccessRefused");
        assert!(refused.message().ends_with("and the kernel refused it (EACCES)."), "{}", refused.message());
        assert_eq!(change(ConflictAction::Audited).reason(), "SinglePodVolumeInUse");
    }

    #[test]
    fn a_refused_open_is_an_access_refused_and_says_so() {
        let open = |action| Conflict::resolve(&facts(), action, "pv-1", "uid-b", "uid-a").routed(Route::Open, None);
        let refused = open(ConflictAction::Refused);
        assert_eq!(refused.reason(), "SinglePodVolumeAccessRefused");
        assert!(refused.message().ends_with(
            "tried to open its files outside kubelet's publish, and the open was refused (EACCES from BPF \
                            LSM, or EPERM with --deny-foreign-open on a node without it)."
        ));
        let audited = open(ConflictAction::Audited);
        assert_eq!(audited.reason(), "SinglePodVolumeInUse");
        assert!(
            audited.message().contains("refused nothing (audit mode, or a node without BPF LSM"),
            "{}",
            audited.message()
        );
        let publish = Conflict::resolve(&facts(), ConflictAction::Refused, "pv-1", "uid-b", "uid-a");
        assert_eq!(publish.reason(), "SinglePodVolumeRefused", "a refused publish keeps its reason");
    }

    /// What the pod experiences differs by mode, and each message says it: only a refused
    /// pod gets the volume by waiting; a quarantined one must be recreated.
    #[test]
    fn each_action_tells_the_pod_what_becomes_of_it() {
        let message = |action| Conflict::resolve(&facts(), action, "pv-1", "uid-b", "uid-a").message();
        assert!(message(ConflictAction::Quarantined).contains("does not get it when that pod releases it: delete"));
        assert!(message(ConflictAction::Audited).contains("both pods now use the volume"));
        assert!(message(ConflictAction::Observed).contains("does not take a running pod's volume away"));
        let released = message(ConflictAction::Released);
        assert!(released.starts_with("volume \"pv-1\" (PVC shop/data) is free: pod shop/db-0 (uid uid-a) released it"));
        assert!(released.contains("delete it, and its replacement mounts the volume"));
        assert_eq!(ConflictAction::Released.metric_label(), None, "a notice is not a conflict");
        assert_eq!(ConflictAction::Observed.metric_label(), Some("observed"));
    }

    #[test]
    fn the_message_names_who_made_the_mount() {
        let c = Conflict::resolve(&facts(), ConflictAction::Quarantined, "pv-1", "uid-b", "uid-a");
        let by = MountedBy::resolve(&facts(), 4242, "mount", Some("uid-a"));
        let text = c.made_by(Some(by)).message();
        assert!(text.ends_with(" The mount was made by pid 4242 (mount) in pod shop/db-0 (uid uid-a)."), "{text}");
        let no_pod = MountedBy::resolve(&facts(), 7, "kubelet", None);
        assert_eq!(no_pod.to_string(), "pid 7 (kubelet)");
    }

    #[test]
    fn unknown_pods_are_named_by_uid() {
        let c = Conflict::resolve(&Facts::default(), ConflictAction::Quarantined, "v", "uid-x", "uid-y");
        assert!(c.message().contains("in use by pod uid uid-y"), "{}", c.message());
        assert_eq!(c.claim, None);
    }

    #[test]
    fn the_limiter_sends_once_per_window_and_counts_the_rest() {
        let c = Conflict::resolve(&facts(), ConflictAction::Refused, "pv-1", "uid-b", "uid-a");
        let mut limiter = RateLimiter::new(Duration::from_secs(60), 100);
        let t0 = Instant::now();
        assert_eq!(limiter.check(&c, t0), Verdict::Send { held_back: 0 });
        for s in 1..5 {
            assert_eq!(limiter.check(&c, t0 + Duration::from_secs(s)), Verdict::Suppress);
        }
        let other = Conflict { action: ConflictAction::Quarantined, ..c.clone() };
        assert_eq!(limiter.check(&other, t0), Verdict::Send { held_back: 0 }, "a different action is its own key");
        let opened = c.clone().routed(Route::Open, None);
        assert_eq!(limiter.check(&opened, t0), Verdict::Send { held_back: 0 }, "a different route is its own key");
        assert_eq!(limiter.check(&c, t0 + Duration::from_secs(61)), Verdict::Send { held_back: 4 });
    }

    #[test]
    fn the_limiter_is_bounded() {
        let mut limiter = RateLimiter::new(Duration::from_secs(60), 3);
        let t0 = Instant::now();
        for i in 0..10u64 {
            let c = Conflict::resolve(&Facts::default(), ConflictAction::Refused, "v", &format!("p{i}"), "o");
            limiter.check(&c, t0 + Duration::from_millis(i));
        }
        assert_eq!(limiter.seen.len(), 3);
    }
}

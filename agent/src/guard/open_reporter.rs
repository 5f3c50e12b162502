//! Where no BPF LSM can refuse an open (quarantine, and audit without it), another pod's
//! opens of an owned volume's files are reported: a fanotify `FAN_OPEN` group per owned
//! volume marks every place that shows that volume — the mount of its publish target, the
//! mounts of it in the owner's containers (what `/proc/<pid>/root`, a setns or
//! `/proc/<pid>/cwd` of the owner reach), and, where the volume is a filesystem of its own,
//! that whole filesystem (any other mount of its device), and other pods' mounts of a
//! directory above the volume's (whose notices count only for files in the volume's
//! directory: `super::ancestor_mounts`). Each group is read off the event
//! loop, in a task of its own; an open by a process of a pod other than the owner comes
//! back to the loop as a [`ForeignAccess`], at most once a second per reader pod and volume.
//! The owner's own opens are notices too (what reporting costs it); they are dropped here.
//! With `--deny-foreign-open` the groups are asked before each open (`FAN_OPEN_PERM`) and
//! refuse another pod's (`EPERM`); every open through the marks then waits for the answer.
//! Each volume's changes (entries, attributes, contents) are watched beside its opens, by
//! `super::change_reporter`, and come back on the same channel.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    io,
    os::fd::OwnedFd,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::{
    io::unix::AsyncFd,
    sync::{mpsc, watch},
    task::JoinHandle,
};
use tracing::{debug, info, warn};

pub use super::foreign_access::{FileAccess, ForeignAccess, OpenScope, Opener};
use super::{
    ancestor_mounts::AncestorMounts,
    change_reporter::{ChangeGroup, ChangePlace},
    node_opens::NodeOpenCounts,
    reader_pods::{Reader, ReaderPods, SharedReaderPods},
};
use crate::sys::fanotify::open_watch::{Answers, OpenNotice, OpenWatch, OpenWatchError, Reach, parse};

/// One owned volume and the places that show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchedVolume {
    pub volume: String,
    pub owner: String,
    pub places: BTreeSet<(PathBuf, Reach)>,
    /// Who else may open, and which of the places are mounts above the volume.
    pub scope: OpenScope,
    /// Where its changes are watched.
    pub changes: ChangePlace,
}

/// Where the namespace scan found a volume shown, besides the owner's publish.
#[derive(Clone, Debug, Default)]
pub struct ScannedPlaces {
    /// The owner's container mounts of it, as `/proc/<pid>/root/<mount point>` paths.
    pub owner: BTreeSet<PathBuf>,
    /// Other pods' mounts above its directory, by mount ID: where the agent reaches the
    /// mount (`/proc/<pid>/root/<mount point>`), and the volume's directory in that
    /// mount's namespace.
    pub ancestors: BTreeMap<i32, (PathBuf, PathBuf)>,
}

/// One report per reader and volume in this long (the reader usually opens many files).
const REPORT_EVERY: Duration = Duration::from_secs(1);
/// Most foreign opens waiting for the loop; more are dropped (and counted in the log).
const QUEUE: usize = 256;

/// The reporter: the loop tells it what to watch, and reads what it found from the
/// receiver [`OpenReporter::start`] gives it.
pub struct OpenReporter {
    wanted: watch::Sender<Vec<WatchedVolume>>,
    manager: JoinHandle<()>,
    /// Each owned volume's places beyond its publish, as the loop's last namespace scan
    /// found them.
    pub scanned: BTreeMap<String, ScannedPlaces>,
}

impl OpenReporter {
    /// Starts the reporter, if fanotify groups can be made here; where `answers`, its
    /// groups refuse other pods' opens. Node processes' opens are counted in `node_opens`.
    pub fn start(
        answers: Answers,
        node_opens: Arc<NodeOpenCounts>,
    ) -> Result<(Self, mpsc::Receiver<ForeignAccess>), OpenWatchError> {
        drop(OpenWatch::new(answers)?);
        let (wanted, wanted_rx) = watch::channel(Vec::new());
        let (found_tx, found) = mpsc::channel(QUEUE);
        let manager = tokio::spawn(manage(
            wanted_rx,
            Sinks { found: found_tx, node_opens, readers: ReaderPods::shared() },
            answers,
        ));
        Ok((Self { wanted, manager, scanned: BTreeMap::new() }, found))
    }

    /// Watches exactly these volumes from now on.
    pub fn watch(&self, volumes: Vec<WatchedVolume>) {
        self.wanted.send_if_modified(|current| {
            let changed = *current != volumes;
            *current = volumes;
            changed
        });
    }
}

impl Drop for OpenReporter {
    fn drop(&mut self) {
        self.manager.abort();
    }
}

/// One volume's group: its marks, and the task that reads it.
struct Group {
    owner: String,
    watch: Arc<AsyncFd<OpenWatch>>,
    marked: BTreeSet<(PathBuf, Reach)>,
    scope: watch::Sender<OpenScope>,
    reader: JoinHandle<()>,
    /// Its changes' watch (none where the filesystem cannot tell them: logged).
    _changes: Option<ChangeGroup>,
}

impl Drop for Group {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Where the groups' findings go: foreign opens to the loop, node processes' opens counted.
#[derive(Clone)]
struct Sinks {
    found: mpsc::Sender<ForeignAccess>,
    node_opens: Arc<NodeOpenCounts>,
    /// Who each process is, shared by every volume's judges.
    readers: SharedReaderPods,
}

/// Keeps one group per wanted volume, with every wanted place marked.
async fn manage(mut wanted: watch::Receiver<Vec<WatchedVolume>>, sinks: Sinks, answers: Answers) {
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    loop {
        let volumes = wanted.borrow_and_update().clone();
        groups.retain(|volume, group| volumes.iter().any(|v| &v.volume == volume && v.owner == group.owner));
        for volume in volumes {
            if !groups.contains_key(&volume.volume) {
                match Group::start(&volume, sinks.clone(), answers) {
                    Ok(group) => {
                        groups.insert(volume.volume.clone(), group);
                    }
                    Err(e) => {
                        warn!("open reports: volume {} not watched: {e}", volume.volume);
                        continue;
                    }
                }
            }
            if let Some(group) = groups.get_mut(&volume.volume) {
                group.mark(&volume);
            }
        }
        if wanted.changed().await.is_err() {
            return;
        }
    }
}

impl Group {
    fn start(volume: &WatchedVolume, sinks: Sinks, answers: Answers) -> io::Result<Self> {
        let watch = OpenWatch::new(answers).map_err(io::Error::other)?;
        // SAFETY: the group's descriptor stays open, and the same, for as long as `watch`
        // lives (it is never replaced).
        let registered = unsafe { AsyncFd::register_with_interest(watch, tokio::io::Interest::READABLE) };
        let watch = Arc::new(registered.map_err(|e| e.into_parts().1)?);
        let (scope, scope_rx) = watch::channel(volume.scope.clone());
        let changes = ChangeGroup::start(
            &volume.volume,
            &volume.owner,
            volume.changes.clone(),
            scope_rx.clone(),
            sinks.found.clone(),
            sinks.readers.clone(),
        )
        .inspect_err(|e| warn!("change reports: volume {} not watched: {e}", volume.volume))
        .ok();
        let judge = OpenJudge::new(volume.volume.clone(), volume.owner.clone(), scope_rx, &sinks);
        let reader = tokio::spawn(read_opens(watch.clone(), judge, sinks.found));
        let owner = volume.owner.clone();
        Ok(Self { owner, watch, marked: BTreeSet::new(), scope, reader, _changes: changes })
    }

    /// Marks the places newly wanted and unmarks those no longer wanted (a mount that went
    /// took its mark with it). The judge learns a mount above the volume before its mark.
    fn mark(&mut self, volume: &WatchedVolume) {
        self.scope.send_if_modified(|scope| {
            let changed = *scope != volume.scope;
            scope.clone_from(&volume.scope);
            changed
        });
        for (path, reach) in self.marked.difference(&volume.places) {
            let _ = self.watch.get_ref().unwatch(path, *reach);
        }
        for (path, reach) in volume.places.difference(&self.marked) {
            match self.watch.get_ref().watch(path, *reach) {
                Ok(()) => {
                    info!("open reports: volume {}'s files watched at {} ({reach:?})", volume.volume, path.display())
                }
                Err(e) => debug!("open reports: volume {}: {e}", volume.volume),
            }
        }
        self.marked = volume.places.clone();
    }
}

/// Reads one volume's group for as long as it is watched, answering each open that
/// waits.
async fn read_opens(watch: Arc<AsyncFd<OpenWatch>>, mut judge: OpenJudge, found: mpsc::Sender<ForeignAccess>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let Ok(mut guard) = watch.readable().await else { return };
        loop {
            match guard.get_inner().read(&mut buf) {
                Ok(len) => {
                    for notice in parse(&buf[..len]) {
                        if let Some(open) = judge.notice(notice, guard.get_inner(), Instant::now())
                            && found.try_send(open).is_err()
                        {
                            judge.dropped += 1;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    guard.clear_ready();
                    break;
                }
                Err(e) => {
                    warn!("open reports: volume {}: reading its notices failed: {e}", judge.volume);
                    return;
                }
            }
        }
        judge.log_dropped();
    }
}

/// Tells the owner's opens from everyone else's, and rate-limits the rest.
struct OpenJudge {
    volume: String,
    owner: String,
    /// Pods besides the owner that may open (exempt readers, CSI node plugins), and the
    /// mounts above the volume.
    scope: watch::Receiver<OpenScope>,
    ancestors: AncestorMounts,
    readers: SharedReaderPods,
    node_opens: Arc<NodeOpenCounts>,
    last_report: HashMap<Opener, Instant>,
    dropped: u64,
}

impl OpenJudge {
    fn new(volume: String, owner: String, scope: watch::Receiver<OpenScope>, sinks: &Sinks) -> Self {
        let (readers, node_opens, last_report) = (sinks.readers.clone(), sinks.node_opens.clone(), HashMap::new());
        let mut ancestors = AncestorMounts::default();
        ancestors.learn(&scope.borrow().ancestors);
        Self { volume, owner, scope, ancestors, readers, node_opens, last_report, dropped: 0 }
    }

    /// Who process `tgid` is (remembered while it lives: `super::reader_pods`).
    fn reader(&self, tgid: u32) -> Reader {
        self.readers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).reader(tgid)
    }

    /// Whether `file` is the volume's (only a file opened through a mount above the
    /// volume may not be).
    fn shows_volume(&mut self, file: &OwnedFd) -> bool {
        if self.scope.has_changed().unwrap_or(false) {
            self.ancestors.learn(&self.scope.borrow_and_update().ancestors);
        }
        self.ancestors.shows_volume(file)
    }

    /// An open of `file` waiting for its answer: allowed unless a pod other than the owner
    /// (and the allowed ones) makes it; refused opens are reported as notices are. The pod
    /// is the waiting process's own (a pid is remembered only while its process lives: a
    /// refusal never falls on another process that took its pid).
    fn opening(&mut self, pid: i32, file: &OwnedFd, now: Instant) -> (bool, Option<ForeignAccess>) {
        let Ok(tgid) = u32::try_from(pid) else { return (true, None) };
        // The agent's own (the change reporter walking the volume's directories).
        if tgid == std::process::id() {
            return (true, None);
        }
        let Reader { opener, command } = self.reader(tgid);
        // A process waiting for the answer is there: in no pod, it is a node process.
        if matches!(opener, Opener::Node | Opener::Gone) {
            if self.shows_volume(file) {
                self.node_opens.count(&command);
            }
            return (true, None);
        }
        if !self.may_not_open(&opener) || !self.shows_volume(file) {
            return (true, None);
        }
        (false, self.report(opener, tgid, command, now, true))
    }

    /// What one notice means: a foreign open to report, or nothing (the owner's, one
    /// reported less than a second ago, an overflow, a notice not understood). An open
    /// that waits is answered on `watch` first.
    fn notice(
        &mut self,
        notice: Result<OpenNotice, crate::sys::fanotify::NoticeError>,
        watch: &OpenWatch,
        now: Instant,
    ) -> Option<ForeignAccess> {
        let (pid, file) = match notice {
            Ok(OpenNotice::Opening { pid, file }) => {
                let (allow, report) = self.opening(pid, &file, now);
                if let Err(e) = watch.answer(&file, allow) {
                    warn!("open reports: volume {}: answering pid {pid}'s open: {e}", self.volume);
                }
                return report;
            }
            Ok(OpenNotice::Opened { pid, file }) => (pid, file),
            Ok(OpenNotice::Overflow) => {
                warn!("open reports: volume {}: the kernel's queue overflowed; opens were not seen", self.volume);
                return None;
            }
            Err(e) => {
                debug!("open reports: volume {}: notice skipped: {e}", self.volume);
                return None;
            }
        };
        let Ok(tgid) = u32::try_from(pid) else { return None };
        if tgid == std::process::id() {
            return None;
        }
        let Reader { opener, command } = self.reader(tgid);
        if opener == Opener::Pod(self.owner.clone()) || !self.shows_volume(&file) {
            return None;
        }
        if opener == Opener::Node {
            self.node_opens.count(&command);
        }
        self.report(opener, tgid, command, now, false)
    }

    /// Whether `reader` is a pod that may not open the volume's files: not the owner, not
    /// an allowed pod (node processes may).
    fn may_not_open(&self, reader: &Opener) -> bool {
        match reader {
            Opener::Pod(pod) => *pod != self.owner && !self.scope.borrow().allowed.contains(pod),
            Opener::Node | Opener::Gone => false,
        }
    }

    /// The report of `reader`'s open, unless one was made less than [`REPORT_EVERY`] ago.
    fn report(
        &mut self,
        reader: Opener,
        tgid: u32,
        command: String,
        now: Instant,
        refused: bool,
    ) -> Option<ForeignAccess> {
        if self.last_report.get(&reader).is_some_and(|at| now.duration_since(*at) < REPORT_EVERY) {
            return None;
        }
        self.last_report.insert(reader.clone(), now);
        let (volume, owner) = (self.volume.clone(), self.owner.clone());
        Some(ForeignAccess { volume, owner, pid: tgid, command, reader, access: FileAccess::Open { refused } })
    }

    fn log_dropped(&mut self) {
        if self.dropped > 0 {
            warn!("open reports: volume {}: {} report(s) dropped, the loop was behind", self.volume, self.dropped);
            self.dropped = 0;
        }
    }
}

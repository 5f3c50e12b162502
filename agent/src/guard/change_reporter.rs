//! Where no kernel hook can refuse a change (quarantine, and audit without BPF LSM),
//! another pod's changes of an owned volume — entries created, deleted or moved, attributes
//! and contents changed — are reported: a fanotify group per owned volume with file
//! identifiers, marked on the volume's directories themselves (every directory of a
//! directory volume, followed as new ones appear) or on the whole filesystem of a volume
//! that is one. The marks are on inodes and filesystems, not mounts: a change by any path
//! (`/proc/<pid>/root`, a hostPath above, the node's `/` at `/host`), mount or namespace
//! is told, and no container of the owner's needs to be found first.
//! Each change is judged by its process's pod, read from `/proc/<pid>/cgroup` when the
//! notice is read: the owner's, the allowed pods', the agent's and node processes' are
//! dropped; another pod's comes back to the loop as a [`ForeignAccess`], at most once a
//! second per reader pod, volume and kind of change.

use std::{
    collections::{HashMap, HashSet},
    io,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::{
    io::unix::AsyncFd,
    sync::{mpsc, watch},
    task::JoinHandle,
};
use tracing::{debug, info, warn};

use super::{
    foreign_access::{FileAccess, ForeignAccess, OpenScope, Opener},
    reader_pods::{Reader, SharedReaderPods},
};
use crate::sys::fanotify::change_watch::{ChangeKind, ChangeNotice, ChangeReach, ChangeWatch, DirHandle, parse};

/// Directories of one volume marked at most: each mark holds its inode in memory, and
/// the node's marks are bounded (`fs.fanotify.max_user_marks`). Past it, deeper
/// directories' changes are not told (logged once).
const DIRECTORIES_MARKED: usize = 8192;
/// One report per reader, volume and kind of change in this long.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// Where a volume's changes are watched from: its root as the agent reaches it, and
/// whether it is a filesystem of its own (one filesystem mark) or a directory (a mark on
/// each of its directories).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangePlace {
    pub root: PathBuf,
    pub reach: ChangeReach,
}

/// One volume's change group: the task that marks and reads it.
pub struct ChangeGroup {
    reader: JoinHandle<()>,
}

impl Drop for ChangeGroup {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl ChangeGroup {
    /// Starts watching `volume`'s changes at `place`; its reports go to `found`.
    pub fn start(
        volume: &str,
        owner: &str,
        place: ChangePlace,
        scope: watch::Receiver<OpenScope>,
        found: mpsc::Sender<ForeignAccess>,
        readers: SharedReaderPods,
    ) -> io::Result<Self> {
        let watch = ChangeWatch::new().map_err(io::Error::other)?;
        // SAFETY: the group's descriptor stays open, and the same, for as long as `watch`
        // lives (it is never replaced).
        let registered = unsafe { AsyncFd::register_with_interest(watch, tokio::io::Interest::READABLE) };
        let watch = Arc::new(registered.map_err(|e| e.into_parts().1)?);
        let judge = ChangeJudge::new(volume.to_owned(), owner.to_owned(), scope, readers);
        let reader = tokio::spawn(read_changes(watch, place, judge, found));
        Ok(Self { reader })
    }
}

/// The directories marked so far, by handle: where each is below the volume's root (what
/// a report names, and where a new directory in it is marked).
#[derive(Default)]
struct Marked {
    below_root: HashMap<DirHandle, PathBuf>,
    full: bool,
}

/// Marks `dir` (reached at `root/below`) and every directory under it, up to
/// [`DIRECTORIES_MARKED`] in all. Blocking: run off the runtime's workers (an open of a
/// directory may wait for the open reporter's answer).
fn mark_tree(watch: &ChangeWatch, root: &Path, below: PathBuf, marked: &mut Marked, volume: &str) {
    let mut pending = vec![below];
    while let Some(below) = pending.pop() {
        if marked.below_root.len() >= DIRECTORIES_MARKED {
            if !marked.full {
                warn!(
                    "change reports: volume {volume}: more than {DIRECTORIES_MARKED} directories; deeper changes not told"
                );
                marked.full = true;
            }
            return;
        }
        let dir = root.join(&below);
        if let Err(e) = watch.watch(&dir, ChangeReach::Directory) {
            debug!("change reports: volume {volume}: {e}");
            continue;
        }
        if let Ok(handle) = DirHandle::of(&dir) {
            marked.below_root.insert(handle, below.clone());
        }
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                pending.push(below.join(entry.file_name()));
            }
        }
    }
}

/// Marks the volume, then reads its group for as long as it is watched; a directory made
/// or moved into a marked one is marked in turn (with what it holds).
async fn read_changes(
    watch: Arc<AsyncFd<ChangeWatch>>,
    place: ChangePlace,
    mut judge: ChangeJudge,
    found: mpsc::Sender<ForeignAccess>,
) {
    let volume = judge.volume.clone();
    let marked = match place.reach {
        ChangeReach::Filesystem => match watch.get_ref().watch(&place.root, ChangeReach::Filesystem) {
            Ok(()) => Marked::default(),
            Err(e) => return warn!("change reports: volume {volume} not watched: {e}"),
        },
        ChangeReach::Directory => {
            let (watch, root, volume) = (watch.clone(), place.root.clone(), volume.clone());
            let walk = tokio::task::spawn_blocking(move || {
                let mut marked = Marked::default();
                mark_tree(watch.get_ref(), &root, PathBuf::new(), &mut marked, &volume);
                marked
            });
            let Ok(marked) = walk.await else { return };
            marked
        }
    };
    info!("change reports: volume {volume}'s changes watched at {} ({:?})", place.root.display(), place.reach);
    let mut marked = Some(marked);
    // A few hundred notices: what one turn handles before the runtime's other tasks run.
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let Ok(mut guard) = watch.readable().await else { return };
        let mut new_dirs = Vec::new();
        // One buffer's worth per turn (see the yield below); readiness stays set until a
        // read finds the queue empty.
        match guard.get_inner().read(&mut buf) {
            Ok(len) => {
                for notice in parse(&buf[..len]) {
                    let entry = entry_of(&notice, marked.as_ref());
                    if let Some(dir) = new_directory(&notice, entry.as_ref()) {
                        new_dirs.push(dir);
                    }
                    for report in judge.notice(notice, entry, Instant::now()) {
                        if found.try_send(report).is_err() {
                            judge.dropped += 1;
                        }
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => guard.clear_ready(),
            Err(e) => return warn!("change reports: volume {volume}: reading its notices failed: {e}"),
        }
        drop(guard);
        judge.log_dropped();
        // The open reporter's tasks share the runtime: with `--deny-foreign-open` every open
        // of the owner's waits for one of them, so a burst of changes (an unpack) must not
        // hold the worker until the queue is empty.
        tokio::task::yield_now().await;
        if place.reach == ChangeReach::Directory && !new_dirs.is_empty() {
            let (watch, root, volume, mut taken) = (watch.clone(), place.root.clone(), volume.clone(), marked.take());
            let walk = tokio::task::spawn_blocking(move || {
                if let Some(marked) = taken.as_mut() {
                    for dir in new_dirs {
                        mark_tree(watch.get_ref(), &root, dir, marked, &volume);
                    }
                }
                taken
            });
            marked = walk.await.ok().flatten();
        }
    }
}

/// The changed entry's place below the volume's root, where the notice names a directory
/// the group marked (else its name alone, or nothing).
fn entry_of(
    notice: &Result<ChangeNotice, crate::sys::fanotify::NoticeError>,
    marked: Option<&Marked>,
) -> Option<PathBuf> {
    let Ok(ChangeNotice::Changed { dir, name, .. }) = notice else { return None };
    let name = name.as_ref().filter(|n| n.as_os_str() != ".")?;
    match dir.as_ref().and_then(|d| marked?.below_root.get(d)) {
        Some(below) => Some(below.join(name)),
        None => Some(PathBuf::from(name)),
    }
}

/// A directory made or moved into a marked one: to be marked too.
fn new_directory(
    notice: &Result<ChangeNotice, crate::sys::fanotify::NoticeError>,
    entry: Option<&PathBuf>,
) -> Option<PathBuf> {
    let Ok(ChangeNotice::Changed { kinds, directory: true, .. }) = notice else { return None };
    let arrived = kinds.iter().any(|k| matches!(k, ChangeKind::Create | ChangeKind::Rename));
    entry.filter(|_| arrived).cloned()
}

/// Tells the owner's, the allowed pods' and node processes' changes from other pods', and
/// rate-limits the rest.
struct ChangeJudge {
    volume: String,
    owner: String,
    scope: watch::Receiver<OpenScope>,
    readers: SharedReaderPods,
    last_report: HashMap<(Opener, ChangeKind), Instant>,
    node_commands: HashSet<String>,
    dropped: u64,
}

impl ChangeJudge {
    fn new(volume: String, owner: String, scope: watch::Receiver<OpenScope>, readers: SharedReaderPods) -> Self {
        let (last_report, node_commands) = (HashMap::new(), HashSet::new());
        Self { volume, owner, scope, readers, last_report, node_commands, dropped: 0 }
    }

    /// What one notice means: a report per kind of change not reported in the last
    /// [`REPORT_EVERY`] for its reader, or none (the owner's, an allowed pod's, a node
    /// process's, an overflow, a notice not understood).
    fn notice(
        &mut self,
        notice: Result<ChangeNotice, crate::sys::fanotify::NoticeError>,
        entry: Option<PathBuf>,
        now: Instant,
    ) -> Vec<ForeignAccess> {
        let (pid, kinds) = match notice {
            Ok(ChangeNotice::Changed { pid, kinds, .. }) => (pid, kinds),
            Ok(ChangeNotice::Overflow) => {
                warn!("change reports: volume {}: the kernel's queue overflowed; changes were not seen", self.volume);
                return Vec::new();
            }
            Err(e) => {
                debug!("change reports: volume {}: notice skipped: {e}", self.volume);
                return Vec::new();
            }
        };
        let Ok(tgid) = u32::try_from(pid) else { return Vec::new() };
        if tgid == std::process::id() {
            return Vec::new();
        }
        // Remembered only while its process lives (`super::reader_pods`).
        let Reader { opener: reader, command } =
            self.readers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).reader(tgid);
        match &reader {
            Opener::Pod(pod) if *pod == self.owner || self.scope.borrow().allowed.contains(pod) => return Vec::new(),
            Opener::Node => {
                if self.node_commands.insert(command.clone()) {
                    debug!(
                        "change reports: volume {}: changed by node process {tgid} ({command}), allowed",
                        self.volume
                    );
                }
                return Vec::new();
            }
            Opener::Pod(_) | Opener::Gone => {}
        }
        let entry = entry.map_or_else(|| "?".to_owned(), |e| e.display().to_string());
        let mut reports = Vec::new();
        for kind in kinds {
            let key = (reader.clone(), kind);
            if self.last_report.get(&key).is_some_and(|at| now.duration_since(*at) < REPORT_EVERY) {
                continue;
            }
            self.last_report.insert(key, now);
            reports.push(ForeignAccess {
                volume: self.volume.clone(),
                owner: self.owner.clone(),
                pid: tgid,
                command: command.clone(),
                reader: reader.clone(),
                access: FileAccess::Change { kind, entry: entry.clone() },
            });
        }
        reports
    }

    fn log_dropped(&mut self) {
        if self.dropped > 0 {
            warn!("change reports: volume {}: {} report(s) dropped, the loop was behind", self.volume, self.dropped);
            self.dropped = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::*;
    use crate::guard::reader_pods::ReaderPods;

    const OWNER: &str = "owner-uid";

    /// An exempt reader's or CSI node plugin's pod.
    const ALLOWED: &str = "driver-uid";

    /// A judge whose notices all come from a child process taken for pod `pod`.
    fn judge_for(pod: Option<&str>) -> (ChangeJudge, u32, std::process::Child) {
        let child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let readers = ReaderPods::shared();
        let opener = pod.map_or(Opener::Node, |p| Opener::Pod(p.to_owned()));
        readers.lock().unwrap().remember(child.id(), Reader { opener, command: "sh".into() });
        let allowed = [ALLOWED.to_owned()].into();
        let (_, scope) = watch::channel(OpenScope { allowed, ..OpenScope::default() });
        (ChangeJudge::new("pv".into(), OWNER.into(), scope, readers), child.id(), child)
    }

    fn changed(pid: u32, kinds: &[ChangeKind]) -> Result<ChangeNotice, crate::sys::fanotify::NoticeError> {
        let name = Some(OsString::from("file"));
        Ok(ChangeNotice::Changed { pid: pid as i32, kinds: kinds.to_vec(), directory: false, dir: None, name })
    }

    #[test]
    fn another_pods_changes_are_reported_once_a_second_per_kind_and_the_owners_allowed_pods_and_nodes_not_at_all() {
        let now = Instant::now();
        let (mut judge, pid, mut child) = judge_for(Some("reader-uid"));
        let first = judge.notice(changed(pid, &[ChangeKind::Delete, ChangeKind::Attributes]), None, now);
        let kinds: Vec<_> = first.iter().map(|r| r.access.clone()).collect();
        assert_eq!(
            kinds,
            [ChangeKind::Delete, ChangeKind::Attributes].map(|kind| FileAccess::Change { kind, entry: "?".into() })
        );
        assert_eq!(first[0].reader, Opener::Pod("reader-uid".into()));
        let again = judge.notice(changed(pid, &[ChangeKind::Delete, ChangeKind::Create]), None, now);
        assert_eq!(again.len(), 1, "only the kind not reported in the last second: {again:?}");
        let later = judge.notice(changed(pid, &[ChangeKind::Delete]), None, now + REPORT_EVERY);
        assert_eq!(later.len(), 1, "a second on, reported again");
        child.kill().unwrap();
        child.wait().unwrap();

        for pod in [Some(OWNER), Some(ALLOWED), None] {
            let (mut judge, pid, mut child) = judge_for(pod);
            assert!(judge.notice(changed(pid, &[ChangeKind::Delete]), None, now).is_empty(), "{pod:?}");
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }
}

//! Where the event loop learns about mounts: the BPF ring buffer of the syscall backends
//! (each syscall, with its caller and duration), or fanotify mount notices (each mount
//! attached to or detached from the watched namespace, read with statmount).

use std::{
    collections::HashSet,
    io,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use tracing::{info, warn};

use super::mount_index::{MountChange, MountIndex, Outcome};
use crate::{
    enforce::quarantine::HeldNamespace,
    kernel::{decode::Record, reader::EventSource, trace_backend::WatchedNamespace},
    outputs::{notification_metrics::NoticeKind, notification_metrics::SkipReason, served_state::ServedState},
    sys::{
        fanotify::{MountWatch, Notice, NoticeError, parse},
        paced_fd::{PacedFd, READ_GAP},
        statmount::{MountFacts, StatmountError, listmount, statmount},
    },
};

/// One thing the event loop handles.
pub(super) enum Input {
    /// A ring-buffer record (syscall backends).
    Record(Record),
    /// A mount attached or detached at kubelet's volume paths (fanotify).
    Mount(MountChange),
    /// A mount attached elsewhere in the watched namespace (fanotify): judged by what it
    /// shows, as no caller is named.
    MountElsewhere(MountFacts),
    /// Notices were dropped (the queue overflowed); the index was rebuilt, and the model
    /// must be reconciled with the mount table now.
    Resynced,
}

/// A quarantine mask the agent attached while handling an input.
pub(super) struct OwnMount {
    pub mnt_id: u64,
    pub mount_point: std::path::PathBuf,
}

pub(super) enum Feed {
    Syscalls(EventSource),
    Notices(NoticeFeed),
}

impl Feed {
    /// Waits for input and hands all that is ready to `sink`, which returns the mounts it
    /// attached itself (indexed before the next notice is handled).
    pub(super) async fn next_batch(&mut self, mut sink: impl FnMut(Input) -> Vec<OwnMount>) -> io::Result<usize> {
        match self {
            Self::Syscalls(events) => {
                events
                    .next_batch(|record| {
                        sink(Input::Record(record));
                    })
                    .await
            }
            Self::Notices(notices) => notices.next_batch(sink).await,
        }
    }

    /// Events lost so far (logged when they rise), where the feed can lose events
    /// silently; the notices' overflow is reported as [`Input::Resynced`] instead.
    pub(super) fn events_lost(&mut self) -> Option<u64> {
        match self {
            Self::Syscalls(events) => Some(events.check()),
            Self::Notices(_) => None,
        }
    }

    /// Runs of the agent's programs the kernel skipped so far; `None` for notices, or
    /// where the kernel does not count them.
    pub(super) fn runs_skipped(&mut self) -> Option<u64> {
        match self {
            Self::Syscalls(events) => events.runs_skipped(),
            Self::Notices(_) => None,
        }
    }
}

/// Most notices handled per wake-up.
const MAX_BATCH: usize = 4096;

/// How often skipped notices are logged (each is counted).
const SKIP_LOG_EVERY: Duration = Duration::from_secs(10);

/// The mounts that `notices` detach. Mount ids are never reused, so a mount attached and
/// detached within one batch is gone: it is not read (its statmount would find nothing,
/// and every statmount takes the namespace's lock that a mounting thread then waits for).
fn detached_in(notices: &[Result<Notice, NoticeError>]) -> HashSet<u64> {
    notices.iter().filter_map(|n| if let Ok(Notice::Detached(id)) = n { Some(*id) } else { None }).collect()
}

/// fanotify mount notices, turned into [`MountChange`]s.
pub(super) struct NoticeFeed {
    /// Read at most once per [`READ_GAP`]: a burst of mounts wakes the loop once per gap,
    /// not once per notice.
    watch: PacedFd<MountWatch>,
    ns_id: u64,
    ns_name: String,
    index: MountIndex,
    buf: Vec<u8>,
    shared: Arc<ServedState>,
    /// Skips since the last log line, and when that was.
    unlogged_skips: u64,
    last_skip_log: Option<Instant>,
}

impl NoticeFeed {
    /// Indexes the namespace's mounts at kubelet's volume paths (before the mount table
    /// is read: a mount detached in between is then reported, not missed) and starts
    /// reading the watch. Returns the namespace, for the quarantine to act in.
    pub(super) fn start(
        watched: WatchedNamespace,
        kubelet_root: &Path,
        shared: Arc<ServedState>,
    ) -> io::Result<(Self, HeldNamespace)> {
        let WatchedNamespace { watch, namespace, name, ns_id } = watched;
        let held = HeldNamespace::new(name.clone(), namespace);
        let mut feed = Self {
            // SAFETY: the watch owns its descriptor until dropped, and the PacedFd owns the watch.
            watch: unsafe { PacedFd::new(watch, READ_GAP) }?,
            ns_id,
            ns_name: name,
            index: MountIndex::new(kubelet_root),
            buf: vec![0; 64 * 1024],
            shared,
            unlogged_skips: 0,
            last_skip_log: None,
        };
        feed.rebuild_index()?;
        info!(
            "watching mount namespace {} (id {ns_id}) for mount notifications: {} mounts at kubelet's volume paths",
            feed.ns_name,
            feed.index.len()
        );
        Ok((feed, held))
    }

    fn rebuild_index(&mut self) -> io::Result<()> {
        let ns_id = self.ns_id;
        // A mount detached since the listing is simply left out.
        let mounts = listmount(ns_id)?.into_iter().filter_map(|id| statmount(id, ns_id).ok());
        self.index.rebuild(mounts);
        Ok(())
    }

    async fn next_batch(&mut self, mut sink: impl FnMut(Input) -> Vec<OwnMount>) -> io::Result<usize> {
        let mut notices = Vec::new();
        let mut guard = self.watch.readable().await?;
        // Bounded, so the loop's other work is not starved; readiness stays set if more wait.
        while notices.len() < MAX_BATCH {
            match guard.get_inner().read(&mut self.buf) {
                Ok(len) => notices.extend(parse(&self.buf[..len])),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    guard.clear_ready();
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        drop(guard);
        let handled = notices.len();
        let gone = detached_in(&notices);
        for notice in notices {
            match notice {
                Ok(notice) => self.handle(notice, &gone, &mut sink)?,
                Err(e) => self.skipped(SkipReason::Undecodable, &e.to_string()),
            }
        }
        Ok(handled)
    }

    /// Handles one notice; `gone` holds the mounts a later notice of the batch detached.
    fn handle(
        &mut self,
        notice: Notice,
        gone: &HashSet<u64>,
        sink: &mut impl FnMut(Input) -> Vec<OwnMount>,
    ) -> io::Result<()> {
        let metrics = &self.shared.metrics.notifications;
        match notice {
            Notice::Attached(_) => metrics.notice(NoticeKind::Attach),
            Notice::Detached(_) => metrics.notice(NoticeKind::Detach),
            Notice::Moved(_) => metrics.notice(NoticeKind::Move),
            Notice::Overflow => {}
        }
        let ns_id = self.ns_id;
        let read = |mnt_id| match gone.contains(&mnt_id) {
            true => Err(StatmountError::Gone { mnt_id }),
            false => statmount(mnt_id, ns_id),
        };
        match self.index.apply(notice, read) {
            Outcome::Changes(changes) => {
                for change in changes {
                    // A mask may be gone before its attach notice is read: indexed now, its
                    // detach is still told.
                    for own in sink(Input::Mount(change)) {
                        self.index.remember_own_mask(own.mnt_id, own.mount_point);
                    }
                }
            }
            Outcome::AttachedElsewhere(facts) => {
                sink(Input::MountElsewhere(facts));
            }
            Outcome::Elsewhere => {}
            Outcome::Skipped(reason, why) => self.skipped(reason, &why),
            Outcome::Overflow => {
                warn!(
                    "the mount notification queue of {} overflowed: notices were dropped; rebuilding the mount \
                     index from listmount and reconciling with the mount table now",
                    self.ns_name
                );
                self.shared.metrics.notifications.resynced();
                self.rebuild_index()?;
                sink(Input::Resynced);
            }
        }
        Ok(())
    }

    /// Counts every skip; logs at most one line per [`SKIP_LOG_EVERY`], with how many.
    fn skipped(&mut self, reason: SkipReason, why: &str) {
        self.shared.metrics.notifications.skipped(reason);
        self.unlogged_skips += 1;
        let now = Instant::now();
        if self.last_skip_log.is_none_or(|at| now.duration_since(at) >= SKIP_LOG_EVERY) {
            info!("{} mount notification(s) skipped ({}), the last: {why}", self.unlogged_skips, reason.label());
            self.unlogged_skips = 0;
            self.last_skip_log = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_mounts_a_batch_detaches_count_as_gone() {
        let notices = [
            Ok(Notice::Attached(1)),
            Ok(Notice::Detached(1)),
            Ok(Notice::Attached(2)),
            Ok(Notice::Moved(3)),
            Err(NoticeError::Version(2)),
            Ok(Notice::Detached(4)),
            Ok(Notice::Overflow),
        ];
        assert_eq!(detached_in(&notices), HashSet::from([1, 4]), "a moved mount is still there");
    }
}

//! The fanotify backend's own counts: the mount notifications read, the ones skipped and
//! why, and the resyncs after the notification queue overflowed. (The syscall backends
//! count `volguard_mount_syscalls_total` and `volguard_events_lost_total` instead.)

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};

/// A `reason` label alone (notices skipped here; masks removed in `metrics`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabels {
    pub(crate) reason: String,
}

/// What a notification said happened to a mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoticeKind {
    Attach,
    Detach,
    Move,
}

/// Why a notification was not acted on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// The mount was detached before statmount could read it (nothing is left to act on).
    GoneBeforeRead,
    /// statmount failed otherwise, or its answer did not decode.
    StatmountFailed,
    /// The notification record did not decode.
    Undecodable,
}

impl SkipReason {
    /// The `reason` label, also used in the log.
    pub fn label(self) -> &'static str {
        match self {
            Self::GoneBeforeRead => "gone_before_read",
            Self::StatmountFailed => "statmount_failed",
            Self::Undecodable => "undecodable",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabels {
    event: String,
}

pub struct NotificationMetrics {
    notices: Family<EventLabels, Counter>,
    skipped: Family<ReasonLabels, Counter>,
    resyncs: Counter,
}

impl NotificationMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let notices = Family::<EventLabels, Counter>::default();
        registry.register(
            "volguard_mount_notifications",
            "fanotify mount notifications read (fanotify backend), by event: attach, detach, move",
            notices.clone(),
        );
        let skipped = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "volguard_mount_notifications_skipped",
            "fanotify mount notifications not acted on, by reason: gone_before_read (detached before statmount \
             read it), statmount_failed, undecodable",
            skipped.clone(),
        );
        let resyncs = Counter::default();
        registry.register(
            "volguard_mount_notification_resyncs",
            "Resyncs from listmount and the mount table after the fanotify queue overflowed (notices were dropped)",
            resyncs.clone(),
        );
        Self { notices, skipped, resyncs }
    }

    pub fn notice(&self, kind: NoticeKind) {
        let event = match kind {
            NoticeKind::Attach => "attach",
            NoticeKind::Detach => "detach",
            NoticeKind::Move => "move",
        };
        self.notices.get_or_create(&EventLabels { event: event.into() }).inc();
    }

    pub fn skipped(&self, why: SkipReason) {
        self.skipped.get_or_create(&ReasonLabels { reason: why.label().into() }).inc();
    }

    pub fn resynced(&self) {
        self.resyncs.inc();
    }
}

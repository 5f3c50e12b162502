//! When the propagated-copies scan after publishes runs (`agent/running/propagated.rs`): a
//! publish of a single-pod volume asks for one, and a burst of them gets two at most.

use std::time::{Duration, Instant};

/// The shortest time between two scans after publishes: a scan reads every process's
/// namespace link and each pod namespace's mount table, which a burst of publishes (a
/// node starting its pods, a CSI driver's stress test) must not repeat for each one.
pub(super) const SCAN_GAP: Duration = Duration::from_millis(500);

/// When the next scan after publishes is due: at once after a quiet [`SCAN_GAP`], else
/// once when the gap ends, however many publishes came within it.
#[derive(Debug, Default)]
pub(super) struct ScanSchedule {
    last: Option<Instant>,
    due: Option<Instant>,
}

impl ScanSchedule {
    /// A publish at `now` wants a scan: true if it is to run now, else it is due at
    /// [`Self::due`].
    pub(super) fn wanted(&mut self, now: Instant) -> bool {
        match self.last.map(|last| last + SCAN_GAP) {
            Some(gap_ends) if now < gap_ends => {
                self.due.get_or_insert(gap_ends);
                false
            }
            _ => true,
        }
    }

    /// A mount a call made was gone from where the call left it before it could be
    /// detached (a runtime's pivot moves its binds into the container's root): a scan
    /// finds it where it is now, as soon as the gap allows.
    pub(super) fn soon(&mut self, now: Instant) {
        let earliest = self.last.map_or(now, |last| (last + SCAN_GAP).max(now));
        self.due = Some(self.due.map_or(earliest, |due| due.min(earliest)));
    }

    /// When a scan held back by the gap is due.
    pub(super) fn due(&self) -> Option<Instant> {
        self.due
    }

    /// A scan ran at `now` (whatever asked for it).
    pub(super) fn ran(&mut self, now: Instant) {
        *self = Self { last: Some(now), due: None };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_publish_after_a_quiet_gap_scans_at_once_and_a_burst_scans_once_when_the_gap_ends() {
        let start = Instant::now();
        let mut scans = ScanSchedule::default();
        assert!(scans.wanted(start), "the first publish");
        scans.ran(start);
        let soon = start + SCAN_GAP / 10;
        assert!(!scans.wanted(soon));
        assert!(!scans.wanted(soon + SCAN_GAP / 10));
        assert_eq!(scans.due(), Some(start + SCAN_GAP), "one scan for the burst, when the gap ends");
        scans.ran(start + SCAN_GAP);
        assert_eq!(scans.due(), None);
        assert!(scans.wanted(start + 2 * SCAN_GAP), "quiet again");
    }

    #[test]
    fn a_moved_mount_asks_for_a_scan_at_once_or_when_the_gap_ends() {
        let start = Instant::now();
        let mut scans = ScanSchedule::default();
        scans.soon(start);
        assert_eq!(scans.due(), Some(start), "no scan yet: at once");
        scans.ran(start);
        scans.soon(start + SCAN_GAP / 10);
        assert_eq!(scans.due(), Some(start + SCAN_GAP), "within the gap: when it ends");
    }

    #[test]
    fn a_reconciliations_scan_counts_for_the_gap() {
        let start = Instant::now();
        let mut scans = ScanSchedule::default();
        scans.ran(start);
        assert!(!scans.wanted(start + SCAN_GAP / 2));
        assert!(scans.wanted(start + SCAN_GAP));
    }
}

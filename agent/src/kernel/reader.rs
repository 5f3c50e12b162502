//! Drains the `EVENTS` ring buffer as it becomes readable and decodes each record.

use aya::maps::{MapData, RingBuf};
use tokio::time::MissedTickBehavior;
use volguard_common::{maps::EVENTS, wakeup::LAZY_DRAIN_MS};

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use volguard_common::counters::Counter;

use super::{
    counters::{CounterWatch, Counters},
    loader::{LoadError, LoadedObject},
    skipped_runs::SkippedRuns,
};
use crate::{
    kernel::decode::{self, DecodeError, Record},
    sys::paced_fd::{PacedFd, READ_GAP},
};

/// Owns the ring buffer; hand it to one task.
pub struct EventReader {
    /// Read at most once per [`READ_GAP`]: a burst of records wakes the reader once per
    /// gap, however many of them the kernel wakes it for.
    ring: PacedFd<RingBuf<MapData>>,
    lazy_drain: tokio::time::Interval,
}

impl EventReader {
    /// Takes the ring buffer out of the loaded object. Needs a tokio runtime with IO enabled.
    pub fn new(object: &mut LoadedObject) -> Result<Self, LoadError> {
        Self::with_lazy_drain(object, Duration::from_millis(LAZY_DRAIN_MS))
    }

    /// As [`EventReader::new`], draining records written without a wake-up every `period`
    /// (tests stretch it to tell a wake-up from a drain).
    pub fn with_lazy_drain(object: &mut LoadedObject, period: Duration) -> Result<Self, LoadError> {
        let missing = || LoadError::MissingMap { map: EVENTS };
        let map = object.take_map(EVENTS)?;
        let ring = RingBuf::try_from(map).map_err(|_| missing())?;
        // SAFETY: the RingBuf owns its map fd, keeps it open until dropped, and always
        // returns the same fd; the PacedFd owns the RingBuf.
        let ring = unsafe { PacedFd::new(ring, READ_GAP) }.map_err(|_| missing())?;
        let mut lazy_drain = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        lazy_drain.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Ok(Self { ring, lazy_drain })
    }

    /// Waits until records are available (woken by the kernel, or found by a drain every
    /// [`LAZY_DRAIN_MS`], for records written without a wake-up), then decodes all of
    /// them into `sink`. Returns how many records were handed over (at least one; decode
    /// failures included).
    pub async fn next_batch(&mut self, mut sink: impl FnMut(Result<Record, DecodeError>)) -> std::io::Result<usize> {
        loop {
            let n = tokio::select! {
                guard = self.ring.readable() => {
                    let mut guard = guard?;
                    let n = drain(guard.get_inner_mut(), &mut sink);
                    guard.clear_ready();
                    n
                }
                _ = self.lazy_drain.tick() => self.ring.get_mut().map_or(0, |ring| drain(ring, &mut sink)),
            };
            if n > 0 {
                return Ok(n);
            }
        }
    }
}

fn drain(ring: &mut RingBuf<MapData>, sink: &mut impl FnMut(Result<Record, DecodeError>)) -> usize {
    let mut n = 0;
    while let Some(record) = ring.next() {
        sink(decode::parse(&record));
        n += 1;
    }
    n
}

/// Ring-buffer records that did not decode, by reason (read at scrape time).
#[derive(Debug, Default)]
pub struct DecodeErrors {
    too_short: AtomicU64,
    unknown_kind: AtomicU64,
}

impl DecodeErrors {
    fn count(&self, error: &DecodeError) {
        let slot = match error {
            DecodeError::TooShort { .. } => &self.too_short,
            DecodeError::UnknownKind(_) => &self.unknown_kind,
        };
        slot.fetch_add(1, Ordering::Relaxed);
    }

    /// `(reason, count)` for every reason, zeros included.
    pub fn by_reason(&self) -> [(&'static str, u64); 2] {
        [
            ("too_short", self.too_short.load(Ordering::Relaxed)),
            ("unknown_kind", self.unknown_kind.load(Ordering::Relaxed)),
        ]
    }

    pub fn total(&self) -> u64 {
        self.by_reason().iter().map(|(_, n)| n).sum()
    }
}

/// Everything a loop over kernel events reads, for the agent and `volguard trace` alike:
/// the ring buffer, the kernel's counters, and the accounting of what went wrong (events
/// lost because the ring buffer was full, enforcement decisions the kernel could not make,
/// records that did not decode), each logged when it happens.
pub struct EventSource {
    reader: EventReader,
    counters: Arc<Counters>,
    lost: CounterWatch,
    enforce_errors: CounterWatch,
    decode_errors: Arc<DecodeErrors>,
    skipped: SkippedRuns,
}

impl EventSource {
    /// Takes the ring buffer and the counters out of the loaded object.
    pub fn new(object: &mut LoadedObject) -> Result<Self, LoadError> {
        Ok(Self {
            reader: EventReader::new(object)?,
            counters: Arc::new(Counters::new(object)?),
            lost: CounterWatch::new(Counter::EventsLost, "events lost: the ring buffer was full"),
            enforce_errors: CounterWatch::new(
                Counter::EnforceErrors,
                "mounts the LSM programs let through undecided: a map read or update failed",
            ),
            decode_errors: Arc::default(),
            skipped: SkippedRuns::new(object),
        })
    }

    /// Waits for records and hands each decoded one to `sink`; an undecodable one is a
    /// counted, logged skip.
    pub async fn next_batch(&mut self, mut sink: impl FnMut(Record)) -> std::io::Result<usize> {
        let decode_errors = &self.decode_errors;
        self.reader
            .next_batch(|record| match record {
                Ok(record) => sink(record),
                Err(e) => {
                    decode_errors.count(&e);
                    tracing::warn!("skipped an undecodable record: {e}");
                }
            })
            .await
    }

    /// Warns about new losses and enforcement errors; returns the events lost so far.
    pub fn check(&mut self) -> u64 {
        self.enforce_errors.check(self.counters.as_ref());
        self.lost.check(self.counters.as_ref())
    }

    /// Runs of the programs the kernel skipped so far (logged when they rise); `None`
    /// where it does not count them.
    pub fn runs_skipped(&mut self) -> Option<u64> {
        self.skipped.check()
    }

    /// Records skipped as undecodable so far.
    pub fn undecodable(&self) -> u64 {
        self.decode_errors.total()
    }

    /// What the metrics read at scrape time.
    pub fn shared_counts(&self) -> (Arc<Counters>, Arc<DecodeErrors>) {
        (self.counters.clone(), self.decode_errors.clone())
    }
}

//! Drains the `EVENTS` ring buffer as it becomes readable and decodes each record.

use aya::maps::{MapData, RingBuf};
use tokio::io::{Interest, unix::AsyncFd};
use volguard_common::maps::EVENTS;

use super::{
    counters::{Counters, LostEvents},
    loader::{LoadError, LoadedObject},
};
use crate::kernel::decode::{self, DecodeError, Record};

/// Owns the ring buffer; hand it to one task.
pub struct EventReader {
    ring: AsyncFd<RingBuf<MapData>>,
}

impl EventReader {
    /// Takes the ring buffer out of the loaded object. Needs a tokio runtime with IO enabled.
    pub fn new(object: &mut LoadedObject) -> Result<Self, LoadError> {
        let missing = || LoadError::MissingMap { map: EVENTS };
        let map = object.take_map(EVENTS)?;
        let ring = RingBuf::try_from(map).map_err(|_| missing())?;
        // SAFETY: the RingBuf owns its map fd, keeps it open until dropped, and always
        // returns the same fd; the AsyncFd owns the RingBuf.
        let ring = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }.map_err(|_| missing())?;
        Ok(Self { ring })
    }

    /// Waits until records are available, then decodes all of them into `sink`.
    /// Returns how many records were handed over (decode failures included).
    pub async fn next_batch(&mut self, mut sink: impl FnMut(Result<Record, DecodeError>)) -> std::io::Result<usize> {
        let mut guard = self.ring.readable_mut().await?;
        let ring = guard.get_inner_mut();
        let mut n = 0;
        while let Some(record) = ring.next() {
            sink(decode::parse(&record));
            n += 1;
        }
        guard.clear_ready();
        Ok(n)
    }
}

/// Everything a loop over kernel events reads, for the agent and `volguard trace` alike:
/// the ring buffer, the kernel's counters, and the accounting of what was lost (the ring
/// buffer was full) or undecodable, each logged once when it happens.
pub struct EventSource {
    reader: EventReader,
    counters: Counters,
    lost: LostEvents,
    undecodable: u64,
}

impl EventSource {
    /// Takes the ring buffer and the counters out of the loaded object.
    pub fn new(object: &mut LoadedObject) -> Result<Self, LoadError> {
        Ok(Self {
            reader: EventReader::new(object)?,
            counters: Counters::new(object)?,
            lost: LostEvents::default(),
            undecodable: 0,
        })
    }

    /// Waits for records and hands each decoded one to `sink`; an undecodable one is a
    /// counted, logged skip.
    pub async fn next_batch(&mut self, mut sink: impl FnMut(Record)) -> std::io::Result<usize> {
        let undecodable = &mut self.undecodable;
        self.reader
            .next_batch(|record| match record {
                Ok(record) => sink(record),
                Err(e) => {
                    *undecodable += 1;
                    tracing::warn!("skipped an undecodable record: {e}");
                }
            })
            .await
    }

    /// Events lost so far (a warning is logged for each new loss).
    pub fn lost(&mut self) -> u64 {
        self.lost.check(&self.counters)
    }

    /// Records skipped as undecodable so far.
    pub fn undecodable(&self) -> u64 {
        self.undecodable
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }
}

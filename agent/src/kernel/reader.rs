//! Drains the `EVENTS` ring buffer as it becomes readable and decodes each record.

use aya::{
    Ebpf,
    maps::{MapData, RingBuf},
};
use tokio::io::{Interest, unix::AsyncFd};
use volguard_common::maps::EVENTS;

use super::loader::LoadError;
use crate::kernel::decode::{self, DecodeError, Record};

/// Owns the ring buffer; hand it to one task.
pub struct EventReader {
    ring: AsyncFd<RingBuf<MapData>>,
}

impl EventReader {
    /// Takes the ring buffer out of `ebpf`. Needs a tokio runtime with IO enabled.
    pub fn new(ebpf: &mut Ebpf) -> Result<Self, LoadError> {
        let missing = || LoadError::MissingMap { map: EVENTS };
        let map = ebpf.take_map(EVENTS).ok_or_else(missing)?;
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

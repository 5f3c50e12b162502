//! Reads the kernel's per-CPU counters (lost events, unpaired exits, LSM runs).

use aya::maps::PerCpuArray;
use volguard_common::{counters::Counter, maps::COUNTERS};

use super::loader::{LoadError, LoadedObject};

/// Typed read access to the `COUNTERS` map.
pub struct Counters {
    map: PerCpuArray<aya::maps::MapData, u64>,
}

impl Counters {
    /// Takes the map out of the loaded object.
    pub fn new(object: &mut LoadedObject) -> Result<Self, LoadError> {
        let map = object.take_map(COUNTERS)?;
        let map = PerCpuArray::try_from(map).map_err(|_| LoadError::MissingMap { map: COUNTERS })?;
        Ok(Self { map })
    }

    /// The sum over all CPUs; an unreadable slot reads as 0.
    pub fn get(&self, counter: Counter) -> u64 {
        self.map.get(&(counter as u32), 0).map_or(0, |per_cpu| per_cpu.iter().sum())
    }
}

/// Reports newly lost events (ring buffer full) once each, so no loss goes unnoticed.
#[derive(Debug, Default)]
pub struct LostEvents {
    reported: u64,
}

impl LostEvents {
    /// Logs a warning if events were lost since the last call; returns the total.
    pub fn check(&mut self, counters: &Counters) -> u64 {
        let lost = counters.get(Counter::EventsLost);
        if lost > self.reported {
            tracing::warn!("{} events lost: the ring buffer was full", lost - self.reported);
            self.reported = lost;
        }
        lost
    }
}

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

/// Reads one kernel counter: the map, or a stand-in where there is no kernel (the metrics
/// reference).
pub trait ReadCounter: Send + Sync {
    fn read(&self, counter: Counter) -> u64;
}

impl ReadCounter for Counters {
    fn read(&self, counter: Counter) -> u64 {
        self.get(counter)
    }
}

/// Warns once for each increase of a counter that means something went wrong, so no
/// such event goes unnoticed in the log.
#[derive(Debug)]
pub struct CounterWatch {
    counter: Counter,
    /// What an increase means, for the warning (`"<n> <meaning>"`).
    meaning: &'static str,
    reported: u64,
}

impl CounterWatch {
    pub fn new(counter: Counter, meaning: &'static str) -> Self {
        Self { counter, meaning, reported: 0 }
    }

    /// Logs a warning if the counter grew since the last call; returns the total.
    pub fn check(&mut self, counters: &dyn ReadCounter) -> u64 {
        let total = counters.read(self.counter);
        if total > self.reported {
            tracing::warn!("{} {} ({})", total - self.reported, self.meaning, self.counter.name());
            self.reported = total;
        }
        total
    }
}

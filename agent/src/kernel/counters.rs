//! Reads the kernel's per-CPU counters (lost events, unpaired exits, LSM runs) and the
//! open guard's count of node processes' opens by command.

use std::collections::BTreeMap;

use aya::maps::{PerCpuArray, PerCpuHashMap};
use volguard_common::{
    counters::Counter,
    maps::{COUNTERS, NODE_OPENS},
    open_guard::COMMAND_LEN,
};

use super::loader::{LoadError, LoadedObject};

/// Typed read access to the `COUNTERS` and `NODE_OPENS` maps.
pub struct Counters {
    map: PerCpuArray<aya::maps::MapData, u64>,
    node_opens: PerCpuHashMap<aya::maps::MapData, [u8; COMMAND_LEN], u64>,
}

impl Counters {
    /// Takes the maps out of the loaded object.
    pub fn new(object: &mut LoadedObject) -> Result<Self, LoadError> {
        let map = object.take_map(COUNTERS)?;
        let map = PerCpuArray::try_from(map).map_err(|_| LoadError::MissingMap { map: COUNTERS })?;
        let node_opens = object.take_map(NODE_OPENS)?;
        let node_opens = PerCpuHashMap::try_from(node_opens).map_err(|_| LoadError::MissingMap { map: NODE_OPENS })?;
        Ok(Self { map, node_opens })
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

/// Node processes' opens of owned volumes' files (which the open guard lets through), by
/// command, from whichever guard counts them: the kernel's, or the fanotify reporter's.
pub trait ReadNodeOpens: Send + Sync {
    /// Opens by command label ([`command_label`]); the commands beyond the bounded set
    /// together as [`OTHER_COMMANDS`].
    fn by_command(&self) -> BTreeMap<String, u64>;
}

/// The label of the opens of every command beyond the bounded set.
pub const OTHER_COMMANDS: &str = "other";

impl ReadNodeOpens for Counters {
    /// The map's commands, and as `other` what the kernel counted in all that the map
    /// could not hold.
    fn by_command(&self) -> BTreeMap<String, u64> {
        let mut opens = BTreeMap::new();
        for (command, per_cpu) in self.node_opens.iter().filter_map(Result::ok) {
            *opens.entry(command_label(&command)).or_default() += per_cpu.iter().sum::<u64>();
        }
        let named: u64 = opens.values().sum();
        let other = self.get(Counter::OpensByNodeProcesses).saturating_sub(named);
        if other > 0 {
            *opens.entry(OTHER_COMMANDS.to_owned()).or_default() += other;
        }
        opens
    }
}

/// A task's command (`comm`, up to its NUL) as a label value: printable ASCII, anything
/// else `_` (a command is whatever its process chose to call itself).
pub fn command_label(comm: &[u8]) -> String {
    let end = comm.iter().position(|b| *b == 0).unwrap_or(comm.len()).min(COMMAND_LEN);
    comm[..end]
        .iter()
        .map(|b| if b.is_ascii_graphic() && *b != b'"' && *b != b'\\' { *b as char } else { '_' })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_label_stops_at_the_nul_and_keeps_printable_ascii_only() {
        assert_eq!(command_label(b"kubelet\0\0\0\0\0\0\0\0\0"), "kubelet");
        assert_eq!(command_label(b"a b\"c\\d\xffe"), "a_b_c_d_e");
        assert_eq!(command_label(b"exactly15chars!"), "exactly15chars!");
        assert_eq!(command_label(b""), "");
    }
}

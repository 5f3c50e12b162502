//! The fanotify reporter's count of node processes' opens of owned volumes' files (which it
//! lets through), by command; the kernel's guard keeps its own in a map. The first
//! [`NODE_OPEN_COMMANDS`] commands are counted each by name, any further together as
//! `other`, so the label set stays bounded whatever runs on the node.

use std::{
    collections::BTreeMap,
    sync::{Mutex, PoisonError},
};

use volguard_common::open_guard::NODE_OPEN_COMMANDS;

use crate::kernel::counters::{OTHER_COMMANDS, ReadNodeOpens, command_label};

#[derive(Debug, Default)]
pub struct NodeOpenCounts(Mutex<BTreeMap<String, u64>>);

impl NodeOpenCounts {
    /// Counts one open by a process whose command is `command` (as `/proc/<pid>/comm` has it).
    pub fn count(&self, command: &str) {
        let label = command_label(command.trim_end().as_bytes());
        let mut opens = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let named = opens.keys().filter(|k| *k != OTHER_COMMANDS).count();
        let key = if opens.contains_key(&label) || named < NODE_OPEN_COMMANDS as usize {
            label
        } else {
            OTHER_COMMANDS.to_owned()
        };
        *opens.entry(key).or_default() += 1;
    }
}

impl ReadNodeOpens for NodeOpenCounts {
    fn by_command(&self) -> BTreeMap<String, u64> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_beyond_the_bounded_set_are_counted_together_as_other() {
        let counts = NodeOpenCounts::default();
        for n in 0..NODE_OPEN_COMMANDS {
            counts.count(&format!("cmd-{n}\n"));
        }
        counts.count("cmd-0\n");
        counts.count("late-comer\n");
        counts.count("another one\n");
        let opens = counts.by_command();
        assert_eq!(opens.len(), NODE_OPEN_COMMANDS as usize + 1);
        assert_eq!(opens["cmd-0"], 2);
        assert_eq!(opens[OTHER_COMMANDS], 2);
        assert!(!opens.contains_key("late-comer"));
    }
}

//! Process-level helpers on top of the OS: running work in a private mount namespace,
//! the signals the agent stops on, and background work at a lower priority.

pub mod background;
pub mod mountns;
pub mod signals;

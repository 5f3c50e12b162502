//! Process-level helpers on top of the OS: running work in a private mount namespace,
//! and the signals the agent stops on.

pub mod mountns;
pub mod signals;

//! One module per hook family.

#[macro_use]
mod security_hook;
mod caller_pod;
mod directory_verdicts;
pub mod enforce;
mod guard_reads;
pub mod kernel_path;
mod lsm_probe;
mod open_guard;
mod operation_guard;
mod syscalls;
mod trampolines;
mod wakeup;

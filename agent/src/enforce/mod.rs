//! Keeping ReadWriteOncePod volumes to one pod, as policy: the mode and why, who owns
//! what (in the kernel's maps through `crate::kernel`, or in userspace), and the
//! userspace fallback (quarantine) for kernels without BPF LSM.

pub mod ancestor_mounts;
pub mod change_reporter;
pub mod decision;
pub mod detach;
pub mod foreign_access;
pub mod mode;
pub mod node_opens;
pub mod ns_thread;
pub mod open_reporter;
pub mod owners;
pub mod ownership;
pub mod quarantine;
pub mod quarantine_error;
pub mod reader_pods;
pub mod task_ns;

pub use mode::{
    DecidedIn, HooksChoice, Mode, ModeChoice, ModeDecision, ModeError, ModeReason, Probes, decide, needs_probe,
};

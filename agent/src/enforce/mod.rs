//! Keeping ReadWriteOncePod volumes to one pod, as policy: the mode and why, who owns
//! what (in the kernel's maps through `crate::kernel`, or in userspace), and the
//! userspace fallback (quarantine) for kernels without BPF LSM.

pub mod decision;
pub mod detach;
pub mod mode;
pub mod ns_thread;
pub mod owners;
pub mod ownership;
pub mod quarantine;
pub mod quarantine_error;
pub mod task_ns;

pub use mode::{
    DecidedIn, HooksChoice, Mode, ModeChoice, ModeDecision, ModeError, ModeReason, Probes, decide, needs_probe,
};

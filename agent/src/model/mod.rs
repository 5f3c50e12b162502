//! The node model: what is published into which pods, which volumes are single-pod and
//! who owns them, which mounts reach an owned volume's data (`access`), the findings, and
//! what a conflict means. Fed by the event loop from the
//! facts, the mount table and kernel events; it never touches the kernel itself.

pub mod access;
pub mod checks;
pub mod event_target;
pub mod exempt;
pub mod explain;
pub mod mounts;
pub mod node;
pub mod volume_ops;

//! What can go wrong in a quarantine, and in the namespace threads it runs on (its own
//! file, so that `ns_thread` and `quarantine` both use it without using each other).

use nix::errno::Errno;

#[derive(Debug, thiserror::Error)]
pub enum QuarantineError {
    #[error("opening the mount namespace {0}: {1}")]
    Namespace(String, std::io::Error),
    #[error("unmounting the mask on {target}: {source}")]
    Unmask { target: String, source: Errno },
    #[error(
        "the mount namespace {mnt_ns} of pid {tgid} is gone and {target} is not mounted in ours: nothing to quarantine"
    )]
    Gone { mnt_ns: u32, tgid: u32, target: String },
    #[error("entering the mount namespace {0}: {1}")]
    Setns(String, Errno),
    #[error(
        "detaching the mount on {target} in the mount namespace {namespace} ({detached} detached before): {source}"
    )]
    Detach { target: String, namespace: String, detached: usize, source: Errno },
    #[error("masking {target} with a read-only tmpfs: {source}")]
    Mask { target: String, source: Errno },
    #[error("the quarantine thread failed to start or panicked")]
    Thread,
}

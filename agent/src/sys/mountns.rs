//! Runs work inside a private mount namespace, so test and probe mounts never reach the
//! host's mount table and disappear with the thread that made them.

use nix::{
    mount::{MsFlags, mount},
    sched::{CloneFlags, unshare},
};

/// Why the private namespace could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum MountNsError {
    #[error("could not start the namespace thread")]
    Spawn(#[source] std::io::Error),
    #[error("unshare(CLONE_NEWNS) failed (root needed)")]
    Unshare(#[source] nix::Error),
    #[error("making / private in the new namespace failed")]
    MakePrivate(#[source] nix::Error),
    #[error("the namespace thread panicked")]
    Panicked,
}

/// Runs `work` on a new thread named `name` (which becomes its `comm`, cut to 15 bytes)
/// in a new mount namespace whose mounts do not propagate to the host.
pub fn run_in_private_mount_ns<T, F>(name: &str, work: F) -> Result<T, MountNsError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            // CLONE_NEWNS implies CLONE_FS: only this thread moves to the new namespace.
            unshare(CloneFlags::CLONE_NEWNS).map_err(MountNsError::Unshare)?;
            mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
                .map_err(MountNsError::MakePrivate)?;
            Ok(work())
        })
        .map_err(MountNsError::Spawn)?
        .join()
        .map_err(|_| MountNsError::Panicked)?
}

//! Telling the syscall exit programs which records may wait for the agent (the rule is in
//! `volguard_common::wakeup`). `volguard trace` leaves it unset: every record wakes it.

use std::{os::unix::ffi::OsStrExt, path::Path};

use aya::maps::Array;
use tracing::{info, warn};
use volguard_common::{
    maps::WAKEUP_FILTER,
    wakeup::{LAZY_DRAIN_MS, WakeupFilter},
};

use super::loader::{LoadError, LoadedObject};

/// Lets records of mounts outside `kubelet_root` be written without waking the reader, and
/// every record where `kernel_decides` conflicts (see `volguard_common::wakeup`). Must run
/// before the programs attach. A root that is not absolute leaves every record waking it
/// where userspace decides (logged).
pub fn set_wakeup_filter(
    object: &mut LoadedObject,
    kubelet_root: &Path,
    kernel_decides: bool,
) -> Result<(), LoadError> {
    let missing = || LoadError::MissingMap { map: WAKEUP_FILTER };
    let for_root = WakeupFilter::for_kubelet_root(kubelet_root.as_os_str().as_bytes());
    let filter = match (for_root, kernel_decides) {
        (Some(filter), false) => {
            info!(
                "mount records outside {} wake the agent only at its drain (or a half-full ring)",
                kubelet_root.display()
            );
            filter
        }
        (for_root, true) => {
            info!(
                "the LSM hooks decide conflicts: mount records wake the agent only at its drain (every {LAZY_DRAIN_MS} ms, or a half-full ring); conflicts at once"
            );
            for_root.unwrap_or(WakeupFilter::EVERY_RECORD_WAKES).kernel_decides()
        }
        (None, false) => {
            warn!(
                "kubelet root {} is not an absolute path that fits: every mount record wakes the agent",
                kubelet_root.display()
            );
            return Ok(());
        }
    };
    let map = object.ebpf.map_mut(WAKEUP_FILTER).ok_or_else(missing)?;
    let write_error = |source| LoadError::MapWrite { map: WAKEUP_FILTER, source };
    let mut array: Array<_, WakeupFilter> = Array::try_from(map).map_err(write_error)?;
    array.set(0, filter, 0).map_err(write_error)
}

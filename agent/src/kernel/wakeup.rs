//! Telling the syscall exit programs which records may wait for the agent (the rule is in
//! `volguard_common::wakeup`). `volguard trace` leaves it unset: every record wakes it.

use std::{os::unix::ffi::OsStrExt, path::Path};

use aya::maps::Array;
use tracing::{info, warn};
use volguard_common::{maps::WAKEUP_FILTER, wakeup::WakeupFilter};

use super::loader::{LoadError, LoadedObject};

/// Lets records of mounts outside `kubelet_root` be written without waking the reader.
/// Must run before the programs attach. A root that is not absolute leaves every record
/// waking it (logged).
pub fn wake_only_for_kubelet_root(object: &mut LoadedObject, kubelet_root: &Path) -> Result<(), LoadError> {
    let missing = || LoadError::MissingMap { map: WAKEUP_FILTER };
    let Some(filter) = WakeupFilter::for_kubelet_root(kubelet_root.as_os_str().as_bytes()) else {
        warn!(
            "kubelet root {} is not an absolute path that fits: every mount record wakes the agent",
            kubelet_root.display()
        );
        return Ok(());
    };
    let map = object.ebpf.map_mut(WAKEUP_FILTER).ok_or_else(missing)?;
    let write_error = |source| LoadError::MapWrite { map: WAKEUP_FILTER, source };
    let mut array: Array<_, WakeupFilter> = Array::try_from(map).map_err(write_error)?;
    array.set(0, filter, 0).map_err(write_error)?;
    info!("mount records outside {} wake the agent only at its drain (or a half-full ring)", kubelet_root.display());
    Ok(())
}

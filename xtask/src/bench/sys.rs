//! The syscalls the bench makes itself: its private mount namespace, bind mounts, inode
//! numbers, and the small wrappers (C paths, errno to an error, clock ticks).

use std::{ffi::CString, os::unix::ffi::OsStrExt, path::Path};

use anyhow::{Context, bail};

pub(super) fn private_namespace() -> anyhow::Result<()> {
    // SAFETY: no preconditions; called while single-threaded.
    sys(unsafe { libc::unshare(libc::CLONE_NEWNS) }, "unshare(CLONE_NEWNS)")?;
    sys(
        // SAFETY: valid strings.
        unsafe {
            libc::mount(
                c"none".as_ptr(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
        },
        "making / rprivate",
    )
}

pub(super) fn bind(src: &Path, tgt: &Path) -> anyhow::Result<()> {
    let (s, t) = (cpath(src), cpath(tgt));
    // SAFETY: valid paths.
    sys(unsafe { libc::mount(s.as_ptr(), t.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null()) }, "bind mount")
        .with_context(|| format!("{} on {}", src.display(), tgt.display()))
}

pub(super) fn ino(p: &Path) -> anyhow::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata(p)?.ino())
}

pub(super) fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("no NUL in bench paths")
}

pub(super) fn sys(ret: i32, what: &str) -> anyhow::Result<()> {
    if ret != 0 {
        bail!("{what}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

pub(super) fn clock_tick() -> f64 {
    // SAFETY: no preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64
}

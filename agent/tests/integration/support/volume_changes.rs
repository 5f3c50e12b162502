//! The changes of a volume's names and attributes that another pod's process tries (the
//! open guard's tests in the VM, where the kernel refuses them, and the change reports on
//! this host, where they are reported), each as raw syscalls a forked child can make.

use std::path::Path;

use super::{kubelet::MountNs, pod_cgroup::PodCgroup};

/// One change of a volume's names or attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Unlink,
    Rmdir,
    RenameWithin,
    RenameIn,
    LinkOut,
    Mkdir,
    Create,
    Symlink,
    Truncate,
    Chmod,
    Chown,
    SetXattr,
    RemoveXattr,
    Utimes,
}

/// The extended attribute the xattr changes set and remove (tmpfs keeps `trusted.*`).
const XATTR: &std::ffi::CStr = c"trusted.volguard-test";

pub const CHANGES: [Change; 14] = [
    Change::Unlink,
    Change::Rmdir,
    Change::RenameWithin,
    Change::RenameIn,
    Change::LinkOut,
    Change::Mkdir,
    Change::Create,
    Change::Symlink,
    Change::Truncate,
    Change::Chmod,
    Change::Chown,
    Change::SetXattr,
    Change::RemoveXattr,
    Change::Utimes,
];

/// The names a change uses, made before a fork: in `dir` (a way into the volume's
/// directory) its `file` and `subdir-<tag>` and new names, and beside the volume in
/// `outside` a file to move in and the name of a link out.
pub struct ChangePaths {
    file: std::ffi::CString,
    subdir: std::ffi::CString,
    renamed: std::ffi::CString,
    moved_in: std::ffi::CString,
    new_dir: std::ffi::CString,
    created: std::ffi::CString,
    symlink: std::ffi::CString,
    outside_file: std::ffi::CString,
    link_out: std::ffi::CString,
}

impl ChangePaths {
    pub fn new(dir: &Path, outside: &Path, tag: &str) -> Self {
        use crate::support::cstr;
        let at = |name: String| cstr(&dir.join(name));
        let beside = |name: &str| cstr(&outside.join(format!("{name}-{tag}")));
        Self {
            file: at("file".into()),
            subdir: at(format!("subdir-{tag}")),
            renamed: at(format!("renamed-{tag}")),
            moved_in: at(format!("moved-in-{tag}")),
            new_dir: at(format!("dir-{tag}")),
            created: at(format!("created-{tag}")),
            symlink: at(format!("symlink-{tag}")),
            outside_file: beside("outside"),
            link_out: beside("link-out"),
        }
    }
}

impl Change {
    /// Makes the change with raw syscalls (it may run in a forked child): 0, or the errno.
    ///
    /// # Safety
    /// None beyond the syscalls' own: the paths are NUL-terminated strings.
    pub unsafe fn apply(self, p: &ChangePaths) -> i32 {
        let errno =
            |rc: libc::c_int| if rc == 0 { 0 } else { std::io::Error::last_os_error().raw_os_error().unwrap_or(-1) };
        // SAFETY: raw syscalls on NUL-terminated strings.
        unsafe {
            match self {
                Change::Unlink => errno(libc::unlink(p.file.as_ptr())),
                Change::Rmdir => errno(libc::rmdir(p.subdir.as_ptr())),
                Change::RenameWithin => errno(libc::rename(p.file.as_ptr(), p.renamed.as_ptr())),
                Change::RenameIn => errno(libc::rename(p.outside_file.as_ptr(), p.moved_in.as_ptr())),
                Change::LinkOut => errno(libc::link(p.file.as_ptr(), p.link_out.as_ptr())),
                Change::Mkdir => errno(libc::mkdir(p.new_dir.as_ptr(), 0o755)),
                Change::Create => {
                    let fd = libc::open(p.created.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o644);
                    if fd < 0 { errno(fd) } else { errno(libc::close(fd)) }
                }
                Change::Symlink => errno(libc::symlink(c"target".as_ptr(), p.symlink.as_ptr())),
                Change::Truncate => errno(libc::truncate(p.file.as_ptr(), 1)),
                Change::Chmod => errno(libc::chmod(p.file.as_ptr(), 0o640)),
                Change::Chown => errno(libc::chown(p.file.as_ptr(), 0, 0)),
                Change::SetXattr => errno(libc::setxattr(p.file.as_ptr(), XATTR.as_ptr(), c"x".as_ptr().cast(), 1, 0)),
                // Of the attribute `SetXattr` set (each list sets it first).
                Change::RemoveXattr => errno(libc::removexattr(p.file.as_ptr(), XATTR.as_ptr())),
                // To now: `touch`.
                Change::Utimes => errno(libc::utimensat(libc::AT_FDCWD, p.file.as_ptr(), std::ptr::null(), 0)),
            }
        }
    }

    /// Whether the change names something outside `dir` (a move in, a link out): through
    /// a mount of its own (a publish target, `/proc/<pid>/root`) the kernel refuses it as
    /// a cross-mount change (`EXDEV`) before any security hook.
    pub fn crosses_out(self) -> bool {
        matches!(self, Change::RenameIn | Change::LinkOut)
    }

    /// As a process of `pod`, in `ns`.
    pub fn try_as(self, pod: &PodCgroup, ns: &MountNs, paths: ChangePaths) -> i32 {
        // SAFETY: raw syscalls in the forked child.
        pod.exit_code_in(ns, move || unsafe { self.apply(&paths) })
    }
}

//! The guard of an owned volume's names, attributes and open files (see
//! `volguard_common::open_guard::OPERATION_HOOKS`): another pod's unlink, rmdir, rename,
//! link, mkdir, create (mknod, and `open(O_CREAT)`), symlink, truncate, chmod, chown, any
//! other attribute change (`utimensat`), setxattr or removexattr of an entry in an owned
//! volume's tree, through any path, mount or namespace, and its receipt of an open file of
//! the tree (`pidfd_getfd(2)` of the owner's descriptor, `SCM_RIGHTS`), are refused with
//! EACCES in enforce mode and reported in audit mode, by the open guard's own decision
//! (`open_guard::guard_dentry`). It judges the entry changed, or, for a new entry, the
//! directory it goes into; a rename and a link are judged at both ends, so that nothing
//! moves or links out of a volume, nor into one.

use aya_ebpf::programs::LsmContext;
use volguard_common::enforce::conflict_hook;

use super::{guard_reads, open_guard::guard_dentry};

security_hook!("path_unlink", path_unlink_guard, path_unlink_guard_fmod_ret, unlink);
security_hook!("path_rmdir", path_rmdir_guard, path_rmdir_guard_fmod_ret, rmdir);
security_hook!("path_rename", path_rename_guard, path_rename_guard_fmod_ret, rename);
security_hook!("path_link", path_link_guard, path_link_guard_fmod_ret, link);
security_hook!("path_mkdir", path_mkdir_guard, path_mkdir_guard_fmod_ret, mkdir);
security_hook!("path_mknod", path_mknod_guard, path_mknod_guard_fmod_ret, mknod);
security_hook!("path_symlink", path_symlink_guard, path_symlink_guard_fmod_ret, symlink);
security_hook!("path_truncate", path_truncate_guard, path_truncate_guard_fmod_ret, truncate);
security_hook!("path_chmod", path_chmod_guard, path_chmod_guard_fmod_ret, chmod);
security_hook!("path_chown", path_chown_guard, path_chown_guard_fmod_ret, chown);
security_hook!("inode_setxattr", inode_setxattr_guard, inode_setxattr_guard_fmod_ret, setxattr);
security_hook!("inode_removexattr", inode_removexattr_guard, inode_removexattr_guard_fmod_ret, removexattr);
security_hook!("file_receive", file_receive_guard, file_receive_guard_fmod_ret, receive);

// `inode_setattr`'s twins by hand: where its dentry is differs between them (below).
#[unsafe(no_mangle)]
#[unsafe(link_section = "lsm/inode_setattr")]
pub fn inode_setattr_guard(ctx: *mut core::ffi::c_void) -> i32 {
    setattr(LsmContext::new(ctx), guard_reads::setattr_dentry_is_second(false))
}

#[unsafe(no_mangle)]
#[unsafe(link_section = "fmod_ret/security_inode_setattr")]
pub fn inode_setattr_guard_fmod_ret(ctx: *mut core::ffi::c_void) -> i32 {
    setattr(LsmContext::new(ctx), guard_reads::setattr_dentry_is_second(true))
}

/// The verdict so far: the hook's argument after its `args` own.
#[inline(always)]
fn previous(ctx: &LsmContext, args: usize) -> i32 {
    ctx.arg(args)
}

/// `verdict` where it refuses, else what `next` decides.
#[inline(always)]
fn then(verdict: i32, next: impl FnOnce() -> i32) -> i32 {
    if verdict != 0 { verdict } else { next() }
}

/// The entry a hook names by its dentry argument `n`.
#[inline(always)]
fn entry(ctx: &LsmContext, n: usize, hook: u32) -> i32 {
    if !guard_reads::layout_set() {
        return 0;
    }
    guard_dentry(ctx.arg(n), hook)
}

/// The entry (or directory) a hook names by its `struct path *` argument `n`.
#[inline(always)]
fn path(ctx: &LsmContext, n: usize, hook: u32) -> i32 {
    if !guard_reads::layout_set() {
        return 0;
    }
    let Some(dentry) = guard_reads::path_dentry(ctx.arg(n)) else { return 0 };
    guard_dentry(dentry, hook)
}

#[inline(always)]
fn unlink(ctx: LsmContext) -> i32 {
    then(previous(&ctx, 2), || entry(&ctx, 1, conflict_hook::PATH_UNLINK))
}

#[inline(always)]
fn rmdir(ctx: LsmContext) -> i32 {
    then(previous(&ctx, 2), || entry(&ctx, 1, conflict_hook::PATH_RMDIR))
}

/// The entry moved, then the directory it moves into.
#[inline(always)]
fn rename(ctx: LsmContext) -> i32 {
    let hook = conflict_hook::PATH_RENAME;
    then(previous(&ctx, 5), || then(entry(&ctx, 1, hook), || path(&ctx, 2, hook)))
}

/// The entry linked (a link out of a volume), then the directory of the new name.
#[inline(always)]
fn link(ctx: LsmContext) -> i32 {
    let hook = conflict_hook::PATH_LINK;
    then(previous(&ctx, 3), || then(entry(&ctx, 0, hook), || path(&ctx, 1, hook)))
}

#[inline(always)]
fn mkdir(ctx: LsmContext) -> i32 {
    then(previous(&ctx, 3), || path(&ctx, 0, conflict_hook::PATH_MKDIR))
}

#[inline(always)]
fn mknod(ctx: LsmContext) -> i32 {
    then(previous(&ctx, 4), || path(&ctx, 0, conflict_hook::PATH_MKNOD))
}

#[inline(always)]
fn symlink(ctx: LsmContext) -> i32 {
    then(previous(&ctx, 3), || path(&ctx, 0, conflict_hook::PATH_SYMLINK))
}

#[inline(always)]
fn truncate(ctx: LsmContext) -> i32 {
    then(previous(&ctx, 1), || path(&ctx, 0, conflict_hook::PATH_TRUNCATE))
}

#[inline(always)]
fn chmod(ctx: LsmContext) -> i32 {
    then(previous(&ctx, 2), || path(&ctx, 0, conflict_hook::PATH_CHMOD))
}

#[inline(always)]
fn chown(ctx: LsmContext) -> i32 {
    then(previous(&ctx, 3), || path(&ctx, 0, conflict_hook::PATH_CHOWN))
}

/// The entry's dentry is the second argument (after the mount's idmap, or user namespace
/// before 6.3).
#[inline(always)]
fn setxattr(ctx: LsmContext) -> i32 {
    then(previous(&ctx, 6), || entry(&ctx, 1, conflict_hook::INODE_SETXATTR))
}

#[inline(always)]
fn removexattr(ctx: LsmContext) -> i32 {
    then(previous(&ctx, 3), || entry(&ctx, 1, conflict_hook::INODE_REMOVEXATTR))
}

/// The file received: judged as an open of it by the receiver.
#[inline(always)]
fn receive(ctx: LsmContext) -> i32 {
    then(previous(&ctx, 1), || {
        if !guard_reads::layout_set() {
            return 0;
        }
        let Some(dentry) = guard_reads::file_dentry(ctx.arg(0)) else { return 0 };
        guard_dentry(dentry, conflict_hook::FILE_RECEIVE)
    })
}

/// `(dentry, attr)`, or `(user namespace or idmap, dentry, attr)`: by kernel, and in some
/// the hook's and `security_inode_setattr`'s differ. The agent reads which from the
/// kernel's BTF; the verifier, knowing it as a constant, explores one branch.
#[inline(always)]
fn setattr(ctx: LsmContext, dentry_second: bool) -> i32 {
    let hook = conflict_hook::INODE_SETATTR;
    if dentry_second {
        then(previous(&ctx, 3), || entry(&ctx, 1, hook))
    } else {
        then(previous(&ctx, 2), || entry(&ctx, 0, hook))
    }
}

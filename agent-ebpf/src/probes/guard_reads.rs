//! The open guard's kernel reads. The guard runs on every open on the node, so it does
//! not call `bpf_probe_read_kernel` as the mount programs do: it reads with plain loads
//! through the hook's BTF-typed pointers, at offsets the agent sets in the read-only global
//! `OPEN_GUARD_LAYOUT` (see `volguard_common::open_guard::OpenGuardLayout`). The verifier
//! knows a frozen read-only global as a constant, checks each load against the field it
//! names, and makes it one that faults cleanly (to 0). So only pointers it knows by type
//! are read here: a hook's arguments and the pointers read from them.

use volguard_common::open_guard::OpenGuardLayout;

use super::enforce::DentryReads;

/// Set by the agent at each load (`OPEN_GUARD_LAYOUT_GLOBAL`).
#[unsafe(no_mangle)]
static OPEN_GUARD_LAYOUT: OpenGuardLayout = OpenGuardLayout::UNSET;

/// One offset of the layout. Read as volatile: a plain read would fold the built-in zeros.
macro_rules! offset {
    ($field:ident) => {
        // SAFETY: a read of a static that lives as long as the program.
        unsafe { core::ptr::read_volatile(&OPEN_GUARD_LAYOUT.$field) }
    };
}

/// Whether the agent set the layout: a load without it leaves the guard deciding nothing.
#[inline(always)]
pub fn layout_set() -> bool {
    offset!(file_dentry) != 0
}

/// A `T` at `base + offset`, `base` a BTF-typed kernel pointer (NULL: none).
#[inline(always)]
fn load<T>(base: *const u8, offset: u32) -> Option<T> {
    if base.is_null() {
        return None;
    }
    // SAFETY: the verifier checks the field at this constant offset of `base`'s type and
    // turns the load into one that cannot fault the kernel.
    Some(unsafe { core::ptr::read_volatile(base.wrapping_add(offset as usize).cast::<T>()) })
}

/// The opened file's dentry (`file->f_path.dentry`).
#[inline(always)]
pub fn file_dentry(file: *const u8) -> Option<*const u8> {
    load(file, offset!(file_dentry))
}

/// A path's dentry (`path->dentry`), for the path hooks.
#[inline(always)]
pub fn path_dentry(path: *const u8) -> Option<*const u8> {
    load(path, offset!(path_dentry))
}

/// The kernel device of the dentry's filesystem (`dentry->d_sb->s_dev`).
#[inline(always)]
pub fn device(dentry: *const u8) -> Option<u32> {
    load(load::<*const u8>(dentry, offset!(dentry_d_sb))?, offset!(super_block_s_dev))
}

/// The dentry's inode (NULL for a negative dentry: none).
#[inline(always)]
pub fn inode(dentry: *const u8) -> Option<*const u8> {
    load(dentry, offset!(dentry_d_inode))
}

/// The inode's generation, which tells a reused inode number's new directory from the old.
#[inline(always)]
pub fn generation(inode: *const u8) -> Option<u32> {
    load(inode, offset!(inode_i_generation))
}

/// The inode's type and permission bits.
#[inline(always)]
pub fn mode(inode: *const u8) -> Option<u16> {
    load(inode, offset!(inode_i_mode))
}

/// A device node's device (`i_rdev`, the kernel's encoding, as `s_dev`).
#[inline(always)]
pub fn rdev(inode: *const u8) -> Option<u32> {
    load(inode, offset!(inode_i_rdev))
}

/// Whether the `inode_setattr` hook's dentry is its second argument (after the mount's
/// user namespace or idmap), for its BPF LSM program or (`fmod_ret`) its fmod_ret one.
#[inline(always)]
pub fn setattr_dentry_is_second(fmod_ret: bool) -> bool {
    let at = if fmod_ret {
        offset!(fmod_ret_setattr_dentry_parameter)
    } else {
        offset!(lsm_setattr_dentry_parameter)
    };
    at == 1
}

/// The walks up of the open guard.
pub struct GuardReads;

impl DentryReads for GuardReads {
    #[inline(always)]
    fn inode_number(&self, dentry: *const u8) -> Option<u64> {
        load(inode(dentry)?, offset!(inode_i_ino))
    }

    #[inline(always)]
    fn parent(&self, dentry: *const u8) -> Option<*const u8> {
        load(dentry, offset!(dentry_d_parent))
    }
}

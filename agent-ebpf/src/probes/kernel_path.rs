//! Reads kernel path structures at offsets userspace found in the running kernel's BTF,
//! and recognises kubelet's publish targets from a resolved dentry.

use aya_ebpf::helpers::{bpf_get_current_task, bpf_probe_read_kernel, bpf_probe_read_kernel_str_bytes};
use volguard_common::enforce::{EnforceConfig, KernelLayout, LAYOUT_NAME_LEN, MAX_TARGET_DEPTH, PodUid, VolumeKey};
use volguard_common::kubelet::{
    BLOCK_PUBLISH_DIR, CSI_PLUGIN_DIRS, CSI_POD_PLUGIN_DIR, PLUGINS_DIR, POD_VOLUMES_DIR, PODS_DIR, PUBLISH_TARGET_DIR,
    VOLUME_DEVICES_DIR,
};

/// Reads a `T` at `base + offset` in kernel memory.
#[inline(always)]
pub fn read_field<T>(base: *const u8, offset: u32) -> Option<T> {
    if base.is_null() {
        return None;
    }
    // SAFETY: the helper faults cleanly on a bad address.
    unsafe { bpf_probe_read_kernel(base.wrapping_add(offset as usize).cast::<T>()) }.ok()
}

/// Inode of the current task's mount namespace, or 0 when the layout is not known.
#[inline(always)]
pub fn current_mnt_ns(l: &KernelLayout) -> u32 {
    if l.task_nsproxy == 0 {
        return 0;
    }
    // SAFETY: helper without preconditions.
    let task = unsafe { bpf_get_current_task() } as *const u8;
    let Some(nsproxy) = read_field::<*const u8>(task, l.task_nsproxy) else { return 0 };
    let Some(mnt_ns) = read_field::<*const u8>(nsproxy, l.nsproxy_mnt_ns) else { return 0 };
    read_field::<u32>(mnt_ns, l.mnt_namespace_ns + l.ns_common_inum).unwrap_or(0)
}

/// The parent dentry (the dentry itself at a filesystem's root).
#[inline(always)]
pub fn parent(l: &KernelLayout, dentry: *const u8) -> Option<*const u8> {
    read_field::<*const u8>(dentry, l.dentry_d_parent)
}

/// The dentry's name as (length, pointer to its bytes).
#[inline(always)]
fn name_of(l: &KernelLayout, dentry: *const u8) -> Option<(u32, *const u8)> {
    let len = read_field::<u32>(dentry, l.dentry_d_name + l.qstr_len)?;
    let name = read_field::<*const u8>(dentry, l.dentry_d_name + l.qstr_name)?;
    Some((len, name))
}

/// Whether the dentry's name is exactly `expected` (at most `LAYOUT_NAME_LEN - 1` bytes).
#[inline(always)]
fn name_is(l: &KernelLayout, dentry: *const u8, expected: &[u8]) -> bool {
    let Some((len, name)) = name_of(l, dentry) else { return false };
    if len as usize != expected.len() {
        return false;
    }
    let mut buf = [0u8; LAYOUT_NAME_LEN];
    // SAFETY: bounded by `buf`; faults cleanly.
    let Ok(read) = (unsafe { bpf_probe_read_kernel_str_bytes(name, &mut buf) }) else { return false };
    if read.len() != expected.len() {
        return false;
    }
    for i in 0..expected.len() {
        if buf[i] != expected[i] {
            return false;
        }
    }
    true
}

/// The parent of `dentry` if that parent is named exactly `expected`. Inlined at each call
/// with a literal, so every comparison keeps a constant bound for the verifier.
#[inline(always)]
fn parent_named(l: &KernelLayout, dentry: *const u8, expected: &[u8]) -> Option<*const u8> {
    let up = parent(l, dentry)?;
    name_is(l, up, expected).then_some(up)
}

/// Copies the dentry's name into a zeroed `dst`; false if it does not fit whole.
#[inline(always)]
fn copy_name(l: &KernelLayout, dentry: *const u8, dst: &mut [u8]) -> bool {
    let Some((len, name)) = name_of(l, dentry) else { return false };
    if len == 0 || len as usize >= dst.len() {
        return false;
    }
    // SAFETY: bounded by `dst`; faults cleanly.
    match unsafe { bpf_probe_read_kernel_str_bytes(name, dst) } {
        Ok(read) => read.len() == len as usize,
        Err(_) => false,
    }
}

/// The kernel device number of the dentry's filesystem.
#[inline(always)]
fn device(l: &KernelLayout, dentry: *const u8) -> Option<u32> {
    let sb = read_field::<*const u8>(dentry, l.dentry_d_sb)?;
    read_field::<u32>(sb, l.super_block_s_dev)
}

/// The dentry's inode number and its filesystem's kernel device number.
#[inline(always)]
pub fn identity(l: &KernelLayout, dentry: *const u8) -> Option<(u64, u32)> {
    Some((inode_number(l, dentry)?, device(l, dentry)?))
}

/// The dentry's inode number.
#[inline(always)]
pub fn inode_number(l: &KernelLayout, dentry: *const u8) -> Option<u64> {
    let inode = read_field::<*const u8>(dentry, l.dentry_d_inode)?;
    read_field::<u64>(inode, l.inode_i_ino)
}

/// Whether `dentry` is on the kubelet root's filesystem: the cheap first test for
/// [`publish_identity`] and [`owning_pod`], whose walks up never leave the filesystem they
/// start on. Most mounts on a node (containers' root filesystems, /proc, /sys, /run) fail
/// it with two reads instead of the name comparisons.
#[inline(always)]
pub fn on_kubelet_root_fs(cfg: &EnforceConfig, dentry: *const u8) -> bool {
    device(&cfg.layout, dentry) == Some(cfg.kubelet_root_dev)
}

/// Whether `dentry` is the kubelet root directory (same inode on the same device).
#[inline(always)]
fn is_kubelet_root(cfg: &EnforceConfig, dentry: *const u8) -> bool {
    identity(&cfg.layout, dentry) == Some((cfg.kubelet_root_ino, cfg.kubelet_root_dev))
}

/// If `dentry` lies under `<kubelet-root>/pods/<uid>` (within `MAX_TARGET_DEPTH`
/// levels, on the kubelet root's filesystem), copies `<uid>` into the zeroed `pod`.
#[inline(always)]
pub fn owning_pod(cfg: &EnforceConfig, dentry: *const u8, pod: &mut PodUid) -> bool {
    let l = &cfg.layout;
    let mut d = dentry;
    for _ in 0..MAX_TARGET_DEPTH {
        let Some(up) = parent(l, d) else { return false };
        if up == d {
            return false;
        }
        if name_is(l, up, PODS_DIR.as_bytes()) {
            let Some(root) = parent(l, up) else { return false };
            if is_kubelet_root(cfg, root) {
                return copy_name(l, d, &mut pod.uid);
            }
        }
        d = up;
    }
    false
}

/// If `target` (a resolved dentry) is a kubelet publish target, writes its volume and
/// pod into the zeroed `volume` and `pod` and returns true.
#[inline(always)]
pub fn publish_identity(cfg: &EnforceConfig, target: *const u8, volume: &mut VolumeKey, pod: &mut PodUid) -> bool {
    let l = &cfg.layout;
    if name_is(l, target, PUBLISH_TARGET_DIR.as_bytes()) {
        // <root>/pods/<pod>/volumes/kubernetes.io~csi/<volume>/mount
        let Some(d1) = parent(l, target) else { return false };
        if !copy_name(l, d1, &mut volume.name) {
            return false;
        }
        let Some(d2) = parent_named(l, d1, CSI_POD_PLUGIN_DIR.as_bytes()) else { return false };
        let Some(d3) = parent_named(l, d2, POD_VOLUMES_DIR.as_bytes()) else { return false };
        let Some(d4) = parent(l, d3) else { return false };
        if !copy_name(l, d4, &mut pod.uid) {
            return false;
        }
        let Some(d5) = parent_named(l, d4, PODS_DIR.as_bytes()) else { return false };
        let Some(root) = parent(l, d5) else { return false };
        return is_kubelet_root(cfg, root);
    }
    // <root>/plugins/kubernetes.io/csi/volumeDevices/publish/<volume>/<pod>
    if !copy_name(l, target, &mut pod.uid) {
        return false;
    }
    let Some(d1) = parent(l, target) else { return false };
    let Some(d2) = parent_named(l, d1, BLOCK_PUBLISH_DIR.as_bytes()) else { return false };
    if !copy_name(l, d1, &mut volume.name) {
        return false;
    }
    // Written out, not looped: each comparison needs a constant bound for the verifier.
    let Some(d3) = parent_named(l, d2, VOLUME_DEVICES_DIR.as_bytes()) else { return false };
    let Some(d4) = parent_named(l, d3, CSI_PLUGIN_DIRS[1].as_bytes()) else { return false };
    let Some(d5) = parent_named(l, d4, CSI_PLUGIN_DIRS[0].as_bytes()) else { return false };
    let Some(d6) = parent_named(l, d5, PLUGINS_DIR.as_bytes()) else { return false };
    let Some(root) = parent(l, d6) else { return false };
    is_kubelet_root(cfg, root)
}

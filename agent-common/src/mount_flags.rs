//! `mount(2)` flag values (include/uapi/linux/mount.h), defined once for both sides.

pub const MS_RDONLY: u64 = 1;
pub const MS_NOSUID: u64 = 1 << 1;
pub const MS_NODEV: u64 = 1 << 2;
pub const MS_NOEXEC: u64 = 1 << 3;
pub const MS_SYNCHRONOUS: u64 = 1 << 4;
pub const MS_REMOUNT: u64 = 1 << 5;
pub const MS_MANDLOCK: u64 = 1 << 6;
pub const MS_DIRSYNC: u64 = 1 << 7;
pub const MS_NOSYMFOLLOW: u64 = 1 << 8;
pub const MS_NOATIME: u64 = 1 << 10;
pub const MS_NODIRATIME: u64 = 1 << 11;
pub const MS_BIND: u64 = 1 << 12;
pub const MS_MOVE: u64 = 1 << 13;
pub const MS_REC: u64 = 1 << 14;
pub const MS_SILENT: u64 = 1 << 15;
pub const MS_POSIXACL: u64 = 1 << 16;
pub const MS_UNBINDABLE: u64 = 1 << 17;
pub const MS_PRIVATE: u64 = 1 << 18;
pub const MS_SLAVE: u64 = 1 << 19;
pub const MS_SHARED: u64 = 1 << 20;
pub const MS_RELATIME: u64 = 1 << 21;
pub const MS_KERNMOUNT: u64 = 1 << 22;
pub const MS_I_VERSION: u64 = 1 << 23;
pub const MS_STRICTATIME: u64 = 1 << 24;
pub const MS_LAZYTIME: u64 = 1 << 25;

/// Old magic number callers may still put in the top 16 bits; the kernel strips it.
pub const MS_MGC_VAL: u64 = 0xC0ED_0000;
pub const MS_MGC_MSK: u64 = 0xFFFF_0000;

/// Every named flag, in bit order, for rendering.
pub const NAMES: crate::mount_api::FlagNames = &[
    (MS_RDONLY, "MS_RDONLY"),
    (MS_NOSUID, "MS_NOSUID"),
    (MS_NODEV, "MS_NODEV"),
    (MS_NOEXEC, "MS_NOEXEC"),
    (MS_SYNCHRONOUS, "MS_SYNCHRONOUS"),
    (MS_REMOUNT, "MS_REMOUNT"),
    (MS_MANDLOCK, "MS_MANDLOCK"),
    (MS_DIRSYNC, "MS_DIRSYNC"),
    (MS_NOSYMFOLLOW, "MS_NOSYMFOLLOW"),
    (MS_NOATIME, "MS_NOATIME"),
    (MS_NODIRATIME, "MS_NODIRATIME"),
    (MS_BIND, "MS_BIND"),
    (MS_MOVE, "MS_MOVE"),
    (MS_REC, "MS_REC"),
    (MS_SILENT, "MS_SILENT"),
    (MS_POSIXACL, "MS_POSIXACL"),
    (MS_UNBINDABLE, "MS_UNBINDABLE"),
    (MS_PRIVATE, "MS_PRIVATE"),
    (MS_SLAVE, "MS_SLAVE"),
    (MS_SHARED, "MS_SHARED"),
    (MS_RELATIME, "MS_RELATIME"),
    (MS_KERNMOUNT, "MS_KERNMOUNT"),
    (MS_I_VERSION, "MS_I_VERSION"),
    (MS_STRICTATIME, "MS_STRICTATIME"),
    (MS_LAZYTIME, "MS_LAZYTIME"),
];

/// `flags` as the kernel sees them after dropping the old magic (fs/namespace.c).
pub const fn without_magic(flags: u64) -> u64 {
    if flags & MS_MGC_MSK == MS_MGC_VAL { flags & !MS_MGC_MSK } else { flags }
}

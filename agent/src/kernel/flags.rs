//! Renders flag arguments by name.

use volguard_common::{
    mount_api::{AT_FDCWD, FSCONFIG_CMDS, FlagNames},
    mount_flags::{NAMES, without_magic},
};

/// `mount(2)` flags: `MS_BIND|MS_REC`; the old magic in the top bits is dropped as the
/// kernel drops it.
pub fn mount(flags: u64) -> String {
    describe(without_magic(flags), NAMES)
}

/// `A|B` by the names in `names`, `0` for none; bits without a name are appended in hex.
pub fn describe(flags: u64, names: FlagNames) -> String {
    if flags == 0 {
        return "0".to_owned();
    }
    let mut rest = flags;
    let mut parts = Vec::new();
    for &(bit, name) in names {
        if rest & bit != 0 {
            parts.push(name.to_owned());
            rest &= !bit;
        }
    }
    if rest != 0 {
        parts.push(format!("{rest:#x}"));
    }
    parts.join("|")
}

/// A `dfd` argument: `AT_FDCWD` or the number.
pub fn dfd(fd: i32) -> String {
    if fd == AT_FDCWD { "AT_FDCWD".to_owned() } else { fd.to_string() }
}

/// An fsconfig(2) command by name, or its number.
pub fn fsconfig_cmd(cmd: u32) -> String {
    FSCONFIG_CMDS.get(cmd as usize).map_or_else(|| cmd.to_string(), |name| (*name).to_owned())
}

#[cfg(test)]
mod tests {
    use volguard_common::{enforce::MountOp, mount_flags::*};

    #[test]
    fn only_binds_moves_and_new_mounts_can_publish_decided_on_flags_alone() {
        let cases = [
            (MS_BIND, MountOp::Bind),
            (MS_BIND | MS_REC, MountOp::Bind),
            (MS_MOVE, MountOp::Move),
            (0, MountOp::NewMount),
            (MS_RDONLY | MS_NOSUID, MountOp::NewMount),
            (MS_REMOUNT | MS_BIND | MS_RDONLY, MountOp::Remount),
            (MS_REMOUNT, MountOp::Remount),
            (MS_PRIVATE | MS_REC, MountOp::ChangePropagation),
            (MS_SHARED, MountOp::ChangePropagation),
            // path_mount checks MS_BIND before the propagation flags.
            (MS_BIND | MS_PRIVATE, MountOp::Bind),
        ];
        for (flags, op) in cases {
            assert_eq!(MountOp::of(flags), op, "{}", super::mount(flags));
        }
        assert!(MountOp::Bind.attaches() && MountOp::Move.attaches() && MountOp::NewMount.attaches());
        assert!(!MountOp::Remount.attaches() && !MountOp::ChangePropagation.attaches());
        assert_eq!(without_magic(MS_MGC_VAL | MS_BIND), MS_BIND);
    }

    use volguard_common::{mount_api as api, mount_flags as ms, mount_flags::MS_MGC_VAL};

    use super::*;

    #[test]
    fn shared_constants_match_the_libc_values() {
        let libc_values = [
            (ms::MS_RDONLY, libc::MS_RDONLY),
            (ms::MS_NOSUID, libc::MS_NOSUID),
            (ms::MS_NODEV, libc::MS_NODEV),
            (ms::MS_NOEXEC, libc::MS_NOEXEC),
            (ms::MS_SYNCHRONOUS, libc::MS_SYNCHRONOUS),
            (ms::MS_REMOUNT, libc::MS_REMOUNT),
            (ms::MS_MANDLOCK, libc::MS_MANDLOCK),
            (ms::MS_DIRSYNC, libc::MS_DIRSYNC),
            (ms::MS_NOSYMFOLLOW, libc::MS_NOSYMFOLLOW),
            (ms::MS_NOATIME, libc::MS_NOATIME),
            (ms::MS_NODIRATIME, libc::MS_NODIRATIME),
            (ms::MS_BIND, libc::MS_BIND),
            (ms::MS_MOVE, libc::MS_MOVE),
            (ms::MS_REC, libc::MS_REC),
            (ms::MS_SILENT, libc::MS_SILENT),
            (ms::MS_POSIXACL, libc::MS_POSIXACL),
            (ms::MS_UNBINDABLE, libc::MS_UNBINDABLE),
            (ms::MS_PRIVATE, libc::MS_PRIVATE),
            (ms::MS_SLAVE, libc::MS_SLAVE),
            (ms::MS_SHARED, libc::MS_SHARED),
            (ms::MS_RELATIME, libc::MS_RELATIME),
            (ms::MS_KERNMOUNT, libc::MS_KERNMOUNT),
            (ms::MS_I_VERSION, libc::MS_I_VERSION),
            (ms::MS_STRICTATIME, libc::MS_STRICTATIME),
            (ms::MS_LAZYTIME, libc::MS_LAZYTIME),
            (ms::MS_MGC_VAL, libc::MS_MGC_VAL),
        ];
        for (ours, theirs) in libc_values {
            assert_eq!(ours, theirs);
        }
        assert_eq!(NAMES.len(), libc_values.len() - 1, "every flag but the magic has a name");
    }

    #[test]
    fn names_flags_in_bit_order() {
        assert_eq!(mount(0), "0");
        assert_eq!(mount(ms::MS_BIND | ms::MS_REC), "MS_BIND|MS_REC");
        assert_eq!(mount(ms::MS_REMOUNT | ms::MS_BIND | ms::MS_RDONLY), "MS_RDONLY|MS_REMOUNT|MS_BIND");
        assert_eq!(
            describe(api::MOVE_MOUNT_F_EMPTY_PATH | api::MOVE_MOUNT_T_SYMLINKS, api::MOVE_MOUNT_NAMES),
            "MOVE_MOUNT_F_EMPTY_PATH|MOVE_MOUNT_T_SYMLINKS"
        );
    }

    #[test]
    fn strips_the_old_magic_and_shows_unknown_bits() {
        assert_eq!(mount(MS_MGC_VAL | ms::MS_NOSUID), "MS_NOSUID");
        assert_eq!(mount(MS_MGC_VAL), "0");
        assert_eq!(mount(ms::MS_BIND | 1 << 40), "MS_BIND|0x10000000000");
    }

    #[test]
    fn new_mount_api_constants_match_libc_where_it_has_them() {
        assert_eq!(api::OPEN_TREE_CLONE, libc::OPEN_TREE_CLONE as u64);
        assert_eq!(api::OPEN_TREE_CLOEXEC, libc::O_CLOEXEC as u64);
        assert_eq!(api::AT_FDCWD, libc::AT_FDCWD);
        assert_eq!(api::AT_EMPTY_PATH, libc::AT_EMPTY_PATH as u64);
        assert_eq!(api::AT_RECURSIVE, libc::AT_RECURSIVE as u64);
        assert_eq!(api::AT_SYMLINK_NOFOLLOW, libc::AT_SYMLINK_NOFOLLOW as u64);
        assert_eq!(api::AT_NO_AUTOMOUNT, libc::AT_NO_AUTOMOUNT as u64);
        assert_eq!(api::MNT_DETACH, libc::MNT_DETACH as u64);
        assert_eq!(api::MNT_FORCE, libc::MNT_FORCE as u64);
        assert_eq!(api::MNT_EXPIRE, libc::MNT_EXPIRE as u64);
        assert_eq!(api::UMOUNT_NOFOLLOW, libc::UMOUNT_NOFOLLOW as u64);
    }

    #[test]
    fn dfds_and_fsconfig_commands() {
        assert_eq!(dfd(-100), "AT_FDCWD");
        assert_eq!(dfd(3), "3");
        assert_eq!(fsconfig_cmd(api::FSCONFIG_CMD_CREATE), "FSCONFIG_CMD_CREATE");
        assert_eq!(fsconfig_cmd(42), "42");
    }
}

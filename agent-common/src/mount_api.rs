//! Flag values of umount2(2) and the new mount API (include/uapi/linux/mount.h,
//! include/uapi/linux/fcntl.h), defined once, with names for rendering.

/// A table of single-bit flags and their names, in bit order.
pub type FlagNames = &'static [(u64, &'static str)];

/// `dfd` value meaning "relative to the current directory".
pub const AT_FDCWD: i32 = -100;

// umount2(2)
pub const MNT_FORCE: u64 = 0x1;
pub const MNT_DETACH: u64 = 0x2;
pub const MNT_EXPIRE: u64 = 0x4;
pub const UMOUNT_NOFOLLOW: u64 = 0x8;
pub const UMOUNT_NAMES: FlagNames = &[
    (MNT_FORCE, "MNT_FORCE"),
    (MNT_DETACH, "MNT_DETACH"),
    (MNT_EXPIRE, "MNT_EXPIRE"),
    (UMOUNT_NOFOLLOW, "UMOUNT_NOFOLLOW"),
];

// AT_* path-lookup flags shared by open_tree, open_tree_attr and mount_setattr.
pub const AT_SYMLINK_NOFOLLOW: u64 = 0x100;
pub const AT_NO_AUTOMOUNT: u64 = 0x800;
pub const AT_EMPTY_PATH: u64 = 0x1000;
pub const AT_RECURSIVE: u64 = 0x8000;

// open_tree(2)
pub const OPEN_TREE_CLONE: u64 = 0x1;
pub const OPEN_TREE_CLOEXEC: u64 = 0x8_0000; // O_CLOEXEC
pub const OPEN_TREE_NAMES: FlagNames = &[
    (OPEN_TREE_CLONE, "OPEN_TREE_CLONE"),
    (AT_SYMLINK_NOFOLLOW, "AT_SYMLINK_NOFOLLOW"),
    (AT_NO_AUTOMOUNT, "AT_NO_AUTOMOUNT"),
    (AT_EMPTY_PATH, "AT_EMPTY_PATH"),
    (AT_RECURSIVE, "AT_RECURSIVE"),
    (OPEN_TREE_CLOEXEC, "OPEN_TREE_CLOEXEC"),
];

// mount_setattr(2) takes the AT_* lookup flags only.
pub const MOUNT_SETATTR_NAMES: FlagNames = &[
    (AT_SYMLINK_NOFOLLOW, "AT_SYMLINK_NOFOLLOW"),
    (AT_NO_AUTOMOUNT, "AT_NO_AUTOMOUNT"),
    (AT_EMPTY_PATH, "AT_EMPTY_PATH"),
    (AT_RECURSIVE, "AT_RECURSIVE"),
];

// move_mount(2)
pub const MOVE_MOUNT_F_SYMLINKS: u64 = 0x1;
pub const MOVE_MOUNT_F_AUTOMOUNTS: u64 = 0x2;
pub const MOVE_MOUNT_F_EMPTY_PATH: u64 = 0x4;
pub const MOVE_MOUNT_T_SYMLINKS: u64 = 0x10;
pub const MOVE_MOUNT_T_AUTOMOUNTS: u64 = 0x20;
pub const MOVE_MOUNT_T_EMPTY_PATH: u64 = 0x40;
pub const MOVE_MOUNT_SET_GROUP: u64 = 0x100;
pub const MOVE_MOUNT_BENEATH: u64 = 0x200;
pub const MOVE_MOUNT_NAMES: FlagNames = &[
    (MOVE_MOUNT_F_SYMLINKS, "MOVE_MOUNT_F_SYMLINKS"),
    (MOVE_MOUNT_F_AUTOMOUNTS, "MOVE_MOUNT_F_AUTOMOUNTS"),
    (MOVE_MOUNT_F_EMPTY_PATH, "MOVE_MOUNT_F_EMPTY_PATH"),
    (MOVE_MOUNT_T_SYMLINKS, "MOVE_MOUNT_T_SYMLINKS"),
    (MOVE_MOUNT_T_AUTOMOUNTS, "MOVE_MOUNT_T_AUTOMOUNTS"),
    (MOVE_MOUNT_T_EMPTY_PATH, "MOVE_MOUNT_T_EMPTY_PATH"),
    (MOVE_MOUNT_SET_GROUP, "MOVE_MOUNT_SET_GROUP"),
    (MOVE_MOUNT_BENEATH, "MOVE_MOUNT_BENEATH"),
];

// fsopen(2), fsmount(2), fspick(2): CLOEXEC is bit 0 for all three.
pub const FSOPEN_CLOEXEC: u64 = 0x1;
pub const FSOPEN_NAMES: FlagNames = &[(FSOPEN_CLOEXEC, "FSOPEN_CLOEXEC")];
pub const FSMOUNT_CLOEXEC: u64 = 0x1;
pub const FSMOUNT_NAMES: FlagNames = &[(FSMOUNT_CLOEXEC, "FSMOUNT_CLOEXEC")];
pub const FSPICK_CLOEXEC: u64 = 0x1;
pub const FSPICK_SYMLINK_NOFOLLOW: u64 = 0x2;
pub const FSPICK_NO_AUTOMOUNT: u64 = 0x4;
pub const FSPICK_EMPTY_PATH: u64 = 0x8;
pub const FSPICK_NAMES: FlagNames = &[
    (FSPICK_CLOEXEC, "FSPICK_CLOEXEC"),
    (FSPICK_SYMLINK_NOFOLLOW, "FSPICK_SYMLINK_NOFOLLOW"),
    (FSPICK_NO_AUTOMOUNT, "FSPICK_NO_AUTOMOUNT"),
    (FSPICK_EMPTY_PATH, "FSPICK_EMPTY_PATH"),
];

// fsmount(2) attr_flags and mount_setattr(2)'s struct mount_attr.
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;
pub const MOUNT_ATTR_NOATIME: u64 = 0x10;
pub const MOUNT_ATTR_STRICTATIME: u64 = 0x20;
pub const MOUNT_ATTR_NODIRATIME: u64 = 0x80;
pub const MOUNT_ATTR_IDMAP: u64 = 0x10_0000;
pub const MOUNT_ATTR_NOSYMFOLLOW: u64 = 0x20_0000;
pub const MOUNT_ATTR_NAMES: FlagNames = &[
    (MOUNT_ATTR_RDONLY, "MOUNT_ATTR_RDONLY"),
    (MOUNT_ATTR_NOSUID, "MOUNT_ATTR_NOSUID"),
    (MOUNT_ATTR_NODEV, "MOUNT_ATTR_NODEV"),
    (MOUNT_ATTR_NOEXEC, "MOUNT_ATTR_NOEXEC"),
    (MOUNT_ATTR_NOATIME, "MOUNT_ATTR_NOATIME"),
    (MOUNT_ATTR_STRICTATIME, "MOUNT_ATTR_STRICTATIME"),
    (MOUNT_ATTR_NODIRATIME, "MOUNT_ATTR_NODIRATIME"),
    (MOUNT_ATTR_IDMAP, "MOUNT_ATTR_IDMAP"),
    (MOUNT_ATTR_NOSYMFOLLOW, "MOUNT_ATTR_NOSYMFOLLOW"),
];

/// fsconfig(2) commands (a value, not a bitset), indexed by value.
pub const FSCONFIG_SET_STRING: u32 = 1;
pub const FSCONFIG_CMD_CREATE: u32 = 6;
pub const FSCONFIG_CMDS: [&str; 9] = [
    "FSCONFIG_SET_FLAG",
    "FSCONFIG_SET_STRING",
    "FSCONFIG_SET_BINARY",
    "FSCONFIG_SET_PATH",
    "FSCONFIG_SET_PATH_EMPTY",
    "FSCONFIG_SET_FD",
    "FSCONFIG_CMD_CREATE",
    "FSCONFIG_CMD_RECONFIGURE",
    "FSCONFIG_CMD_CREATE_EXCL",
];

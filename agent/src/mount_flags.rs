//! Renders `mount(2)` flags by name.

use volguard_common::mount_flags::{MS_MGC_MSK, MS_MGC_VAL, NAMES};

/// `MS_BIND|MS_REC`, `0` for none; bits without a name are appended in hex.
pub fn describe(flags: u64) -> String {
    let mut rest = if flags & MS_MGC_MSK == MS_MGC_VAL {
        flags & !MS_MGC_MSK
    } else {
        flags
    };
    if rest == 0 {
        return "0".to_owned();
    }
    let mut parts = Vec::new();
    for (bit, name) in NAMES {
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

#[cfg(test)]
mod tests {
    use volguard_common::mount_flags as ms;

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
        assert_eq!(
            NAMES.len(),
            libc_values.len() - 1,
            "every flag but the magic has a name"
        );
    }

    #[test]
    fn names_flags_in_bit_order() {
        assert_eq!(describe(0), "0");
        assert_eq!(describe(ms::MS_BIND | ms::MS_REC), "MS_BIND|MS_REC");
        assert_eq!(
            describe(ms::MS_REMOUNT | ms::MS_BIND | ms::MS_RDONLY),
            "MS_RDONLY|MS_REMOUNT|MS_BIND"
        );
    }

    #[test]
    fn strips_the_old_magic_and_shows_unknown_bits() {
        assert_eq!(describe(MS_MGC_VAL | ms::MS_NOSUID), "MS_NOSUID");
        assert_eq!(describe(MS_MGC_VAL), "0");
        assert_eq!(describe(ms::MS_BIND | 1 << 40), "MS_BIND|0x10000000000");
    }
}

//! statmount(2) and listmount(2) (Linux 6.8; a namespace other than the caller's since
//! 6.11): one mount's facts by its 64-bit unique id, and every mount of a namespace,
//! without parsing a whole mountinfo; and the unique id of the mount at a path (statx).
//! [`decode`] reads a statmount buffer and never panics on a short or inconsistent one.

use std::{
    ffi::OsStr,
    fs::File,
    io,
    os::{fd::AsRawFd, unix::ffi::OsStrExt},
    path::{Path, PathBuf},
};

/// Numbers and layouts libc does not have yet: syscall numbers from
/// arch/x86/entry/syscalls/syscall_64.tbl, the rest from include/uapi/linux/mount.h and
/// include/uapi/linux/nsfs.h.
mod uapi {
    pub const SYS_STATMOUNT: libc::c_long = 457;
    pub const SYS_LISTMOUNT: libc::c_long = 458;

    /// `struct mnt_id_req` with `mnt_ns_id` (`MNT_ID_REQ_SIZE_VER1`).
    #[repr(C)]
    pub struct MntIdReq {
        pub size: u32,
        pub spare: u32,
        pub mnt_id: u64,
        pub param: u64,
        pub mnt_ns_id: u64,
    }
    pub const MNT_ID_REQ_SIZE_VER1: u32 = 32;
    const _: () = assert!(size_of::<MntIdReq>() == MNT_ID_REQ_SIZE_VER1 as usize);

    pub const STATMOUNT_SB_BASIC: u64 = 0x0000_0001;
    pub const STATMOUNT_MNT_BASIC: u64 = 0x0000_0002;
    pub const STATMOUNT_MNT_ROOT: u64 = 0x0000_0008;
    pub const STATMOUNT_MNT_POINT: u64 = 0x0000_0010;
    pub const STATMOUNT_FS_TYPE: u64 = 0x0000_0020;
    pub const STATMOUNT_MNT_NS_ID: u64 = 0x0000_0040;
    pub const STATMOUNT_SB_SOURCE: u64 = 0x0000_0200;

    /// statx's `STATX_MNT_ID_UNIQUE` (include/uapi/linux/stat.h, Linux 6.8): `stx_mnt_id`
    /// is the 64-bit unique id, not the reused one mountinfo shows.
    pub const STATX_MNT_ID_UNIQUE: u32 = 0x4000;

    /// listmount's `mnt_id` for "the whole namespace".
    pub const LSMT_ROOT: u64 = u64::MAX;

    /// `NS_GET_MNTNS_ID`: `_IOR(NSIO = 0xb7, 0x5, __u64)`.
    pub const NS_GET_MNTNS_ID: libc::c_ulong = (2 << 30) | (8 << 16) | (0xb7 << 8) | 0x5;

    /// Offsets in `struct statmount` (its fixed part is 512 bytes; strings follow, at
    /// the offsets the `[str]` fields give, counted from `str`).
    pub mod offset {
        pub const SIZE: usize = 0;
        pub const MASK: usize = 8;
        pub const SB_DEV_MAJOR: usize = 16;
        pub const SB_DEV_MINOR: usize = 20;
        pub const FS_TYPE: usize = 36;
        pub const MNT_ID: usize = 40;
        pub const MNT_PARENT_ID: usize = 48;
        pub const MNT_ID_OLD: usize = 56;
        pub const MNT_ROOT: usize = 104;
        pub const MNT_POINT: usize = 108;
        pub const MNT_NS_ID: usize = 112;
        pub const SB_SOURCE: usize = 124;
        pub const STR: usize = 512;
    }
}

/// The facts of one mount the agent reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountFacts {
    /// The 64-bit unique id (never reused while the system runs).
    pub mnt_id: u64,
    pub parent_id: u64,
    /// The id mountinfo shows (reused).
    pub mnt_id_old: u32,
    /// Where it is mounted, as seen from the namespace's root.
    pub mount_point: PathBuf,
    /// The directory of its filesystem it shows (a bind's source, within the filesystem).
    pub root: PathBuf,
    pub fs_type: String,
    /// The mount source (`/dev/sdb`, a tmpfs's name); `None` where the kernel gave none.
    pub source: Option<String>,
    pub dev: (u32, u32),
    pub ns_id: u64,
}

/// What [`statmount`] asks for.
const WANTED: u64 = uapi::STATMOUNT_SB_BASIC
    | uapi::STATMOUNT_MNT_BASIC
    | uapi::STATMOUNT_MNT_ROOT
    | uapi::STATMOUNT_MNT_POINT
    | uapi::STATMOUNT_FS_TYPE
    | uapi::STATMOUNT_MNT_NS_ID
    | uapi::STATMOUNT_SB_SOURCE;

/// Without these the answer is of no use.
const NEEDED: u64 = uapi::STATMOUNT_MNT_BASIC | uapi::STATMOUNT_MNT_POINT | uapi::STATMOUNT_FS_TYPE;

/// Why a statmount buffer could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StatmountDecodeError {
    #[error("statmount answered {len} bytes, less than its {need}-byte fixed part")]
    Short { len: usize, need: usize },
    #[error("statmount left out fields {missing:#x} (mask {mask:#x})")]
    Missing { mask: u64, missing: u64 },
    #[error("statmount's {field} string is out of bounds or unterminated")]
    BadString { field: &'static str },
}

/// Why statmount failed.
#[derive(Debug, thiserror::Error)]
pub enum StatmountError {
    /// The mount is gone (detached since it was named), or was never in the namespace.
    #[error("mount {mnt_id} is not in the namespace (detached since?)")]
    Gone { mnt_id: u64 },
    #[error("statmount of mount {mnt_id}: {source}")]
    Syscall {
        mnt_id: u64,
        #[source]
        source: io::Error,
    },
    #[error("statmount of mount {mnt_id}: {source}")]
    Decode {
        mnt_id: u64,
        #[source]
        source: StatmountDecodeError,
    },
}

/// The id of the mount namespace `ns` (an open `/proc/<pid>/ns/mnt`), as statmount and
/// listmount name namespaces.
pub fn namespace_id(ns: &File) -> io::Result<u64> {
    let mut id = 0u64;
    // SAFETY: the ioctl writes one u64 into `id`, which outlives the call.
    let ret = unsafe { libc::ioctl(ns.as_raw_fd(), uapi::NS_GET_MNTNS_ID, &mut id as *mut u64) };
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(id) }
}

/// Reads mount `mnt_id` of namespace `ns_id`.
pub fn statmount(mnt_id: u64, ns_id: u64) -> Result<MountFacts, StatmountError> {
    let req = uapi::MntIdReq { size: uapi::MNT_ID_REQ_SIZE_VER1, spare: 0, mnt_id, param: WANTED, mnt_ns_id: ns_id };
    // Three paths of up to PATH_MAX fit; EOVERFLOW grows it.
    let mut buf = vec![0u64; (uapi::offset::STR + 3 * 4096) / 8];
    loop {
        let bytes = buf.len() * 8;
        // SAFETY: `req` and `buf` are valid for the call; the kernel writes at most
        // `bytes` bytes into `buf`.
        let ret =
            unsafe { libc::syscall(uapi::SYS_STATMOUNT, &req as *const uapi::MntIdReq, buf.as_mut_ptr(), bytes, 0u32) };
        if ret >= 0 {
            // SAFETY: u64s viewed as bytes.
            let view = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), bytes) };
            return decode(view).map_err(|source| StatmountError::Decode { mnt_id, source });
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::ENOENT) => return Err(StatmountError::Gone { mnt_id }),
            Some(libc::EOVERFLOW) if bytes < 1 << 20 => buf.resize(buf.len() * 2, 0),
            _ => return Err(StatmountError::Syscall { mnt_id, source: error }),
        }
    }
}

/// The 64-bit unique id of the mount on top at `path` (statx, Linux 6.8), or `None`
/// where the kernel does not give it. Unique ids grow with each new mount, so they order
/// mounts by age, which the reused ids of mountinfo do not. Asks the filesystem nothing
/// (`AT_STATX_DONT_SYNC`): a hung network mount does not block it.
pub fn unique_mount_id(path: &Path) -> io::Result<Option<u64>> {
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    let flags = libc::AT_SYMLINK_NOFOLLOW | libc::AT_NO_AUTOMOUNT | libc::AT_STATX_DONT_SYNC;
    // SAFETY: an all-zero statx is a valid value of the plain-data struct.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `c_path` is NUL-terminated and `stx` is valid for writes; both outlive the call.
    let ret = unsafe { libc::statx(libc::AT_FDCWD, c_path.as_ptr(), flags, uapi::STATX_MNT_ID_UNIQUE, &mut stx) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((stx.stx_mask & uapi::STATX_MNT_ID_UNIQUE != 0).then_some(stx.stx_mnt_id))
}

/// The unique ids of every mount of namespace `ns_id`.
pub fn listmount(ns_id: u64) -> io::Result<Vec<u64>> {
    const PAGE: usize = 1024;
    let mut ids = Vec::new();
    let mut last = 0u64;
    loop {
        let req = uapi::MntIdReq {
            size: uapi::MNT_ID_REQ_SIZE_VER1,
            spare: 0,
            mnt_id: uapi::LSMT_ROOT,
            param: last,
            mnt_ns_id: ns_id,
        };
        let mut page = vec![0u64; PAGE];
        // SAFETY: `req` and `page` are valid; the kernel writes at most PAGE ids.
        let n =
            unsafe { libc::syscall(uapi::SYS_LISTMOUNT, &req as *const uapi::MntIdReq, page.as_mut_ptr(), PAGE, 0u32) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = (n as usize).min(PAGE);
        ids.extend_from_slice(&page[..n]);
        match page[..n].last() {
            Some(&id) if n == PAGE => last = id,
            _ => return Ok(ids),
        }
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4).and_then(|s| s.try_into().ok()).map_or(0, u32::from_ne_bytes)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8).and_then(|s| s.try_into().ok()).map_or(0, u64::from_ne_bytes)
}

/// Decodes a statmount answer (`buf` may be longer than the `size` it states).
pub fn decode(buf: &[u8]) -> Result<MountFacts, StatmountDecodeError> {
    use uapi::offset;
    if buf.len() < offset::STR {
        return Err(StatmountDecodeError::Short { len: buf.len(), need: offset::STR });
    }
    let size = (u32_at(buf, offset::SIZE) as usize).clamp(offset::STR, buf.len());
    let strings = &buf[offset::STR..size];
    let mask = u64_at(buf, offset::MASK);
    if mask & NEEDED != NEEDED {
        return Err(StatmountDecodeError::Missing { mask, missing: NEEDED & !mask });
    }
    let string = |field: &'static str, at: usize| -> Result<&[u8], StatmountDecodeError> {
        let start = u32_at(buf, at) as usize;
        let tail = strings.get(start..).ok_or(StatmountDecodeError::BadString { field })?;
        let end = tail.iter().position(|&b| b == 0).ok_or(StatmountDecodeError::BadString { field })?;
        Ok(&tail[..end])
    };
    let path = |bytes: &[u8]| PathBuf::from(OsStr::from_bytes(bytes));
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let has = |bit: u64| mask & bit != 0;
    Ok(MountFacts {
        mnt_id: u64_at(buf, offset::MNT_ID),
        parent_id: u64_at(buf, offset::MNT_PARENT_ID),
        mnt_id_old: u32_at(buf, offset::MNT_ID_OLD),
        mount_point: path(string("mnt_point", offset::MNT_POINT)?),
        root: if has(uapi::STATMOUNT_MNT_ROOT) { path(string("mnt_root", offset::MNT_ROOT)?) } else { PathBuf::new() },
        fs_type: text(string("fs_type", offset::FS_TYPE)?),
        source: match has(uapi::STATMOUNT_SB_SOURCE) {
            true => Some(text(string("sb_source", offset::SB_SOURCE)?)),
            false => None,
        },
        dev: (u32_at(buf, offset::SB_DEV_MAJOR), u32_at(buf, offset::SB_DEV_MINOR)),
        ns_id: if has(uapi::STATMOUNT_MNT_NS_ID) { u64_at(buf, offset::MNT_NS_ID) } else { 0 },
    })
}

#[cfg(test)]
mod tests {
    use super::{uapi::offset, *};

    /// A statmount answer as the kernel lays it out.
    fn answer(mask: u64, strings: &[(usize, &str)]) -> Vec<u8> {
        let mut b = vec![0u8; offset::STR];
        let mut tail = Vec::new();
        for (field, s) in strings {
            b[*field..*field + 4].copy_from_slice(&(tail.len() as u32).to_ne_bytes());
            tail.extend_from_slice(s.as_bytes());
            tail.push(0);
        }
        b[offset::MASK..offset::MASK + 8].copy_from_slice(&mask.to_ne_bytes());
        b[offset::MNT_ID..offset::MNT_ID + 8].copy_from_slice(&0x2_0000_0042u64.to_ne_bytes());
        b[offset::MNT_ID_OLD..offset::MNT_ID_OLD + 4].copy_from_slice(&77u32.to_ne_bytes());
        b[offset::MNT_NS_ID..offset::MNT_NS_ID + 8].copy_from_slice(&9u64.to_ne_bytes());
        b.extend_from_slice(&tail);
        let size = b.len() as u32;
        b[..4].copy_from_slice(&size.to_ne_bytes());
        b
    }

    fn full() -> Vec<u8> {
        answer(
            WANTED,
            &[
                (offset::MNT_POINT, "/var/lib/kubelet/pods/a/volumes/kubernetes.io~csi/pv/mount"),
                (offset::MNT_ROOT, "/volumes/pv"),
                (offset::FS_TYPE, "ext4"),
                (offset::SB_SOURCE, "/dev/sdb"),
            ],
        )
    }

    #[test]
    fn decodes_ids_paths_and_strings() {
        let mut buf = full();
        buf.extend_from_slice(&[0xAA; 64]); // the rest of the caller's buffer
        let m = decode(&buf).unwrap();
        assert_eq!((m.mnt_id, m.mnt_id_old, m.ns_id), (0x2_0000_0042, 77, 9));
        assert_eq!(m.mount_point, PathBuf::from("/var/lib/kubelet/pods/a/volumes/kubernetes.io~csi/pv/mount"));
        assert_eq!(
            (m.root.to_str(), m.fs_type.as_str(), m.source.as_deref()),
            (Some("/volumes/pv"), "ext4", Some("/dev/sdb"))
        );
    }

    #[test]
    fn short_missing_and_out_of_bounds_answers_are_errors_not_panics() {
        assert_eq!(decode(&[0; 100]), Err(StatmountDecodeError::Short { len: 100, need: offset::STR }));
        let no_point = answer(WANTED & !uapi::STATMOUNT_MNT_POINT, &[(offset::FS_TYPE, "ext4")]);
        assert!(matches!(decode(&no_point), Err(StatmountDecodeError::Missing { .. })));
        let mut wild = full();
        wild[offset::MNT_POINT..offset::MNT_POINT + 4].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(decode(&wild), Err(StatmountDecodeError::BadString { field: "mnt_point" }));
        let mut unterminated = full();
        let last = unterminated.len() - 1;
        unterminated[last] = b'x';
        assert_eq!(decode(&unterminated), Err(StatmountDecodeError::BadString { field: "sb_source" }));
        let no_source = answer(
            WANTED & !uapi::STATMOUNT_SB_SOURCE,
            &[(offset::MNT_POINT, "/m"), (offset::FS_TYPE, "t"), (offset::MNT_ROOT, "/")],
        );
        assert_eq!(decode(&no_source).unwrap().source, None);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1024)) {
            let _ = decode(&bytes);
        }
    }
}

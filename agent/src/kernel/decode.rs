//! Pure decoding of ring-buffer records into owned events. Never panics on bad input:
//! short or unknown records become a [`DecodeError`] the caller counts.

use std::{fmt, mem::size_of, time::SystemTime};

use volguard_common::{
    enforce::{CONFLICT_EVENT_KIND, ConflictEvent, conflict_action, conflict_hook},
    event::{EventHeader, SyscallEvent, kind, truncated},
    open_guard::OPERATION_HOOKS,
};

use crate::sys::clock::wall_time_of_monotonic;

/// One ring-buffer record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Syscall(Event),
    Conflict(LsmConflict),
}

/// A publish of an owned single-pod volume into another pod, seen by an LSM hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LsmConflict {
    /// True when refused in the kernel (enforce mode); false when only reported (audit).
    pub blocked: bool,
    /// `sb_mount` or `move_mount`.
    pub hook: &'static str,
    pub caller: Caller,
    pub time_ns: u64,
    pub volume: RawString,
    pub owner: RawString,
    pub attempted_by: RawString,
}

/// One mount-family syscall, entry and exit paired in the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub caller: Caller,
    /// Kernel monotonic time at entry, in ns.
    pub start_ns: u64,
    pub duration_ns: u64,
    /// The return value: a negative errno on failure, an fd for the fd-making calls.
    pub ret: i64,
    pub call: Call,
}

impl Event {
    /// When the call returned, on the wall clock. The programs stamp calls with the
    /// kernel's monotonic clock; a record can be read a drain period after the call (where
    /// the kernel decides conflicts, records wait for the agent's timed drain).
    pub fn returned_at(&self) -> SystemTime {
        wall_time_of_monotonic(self.start_ns.saturating_add(self.duration_ns))
    }
}

/// Who made a syscall.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    pub pid: u32,
    pub tgid: u32,
    /// Inode of the caller's mount namespace (0 when unknown).
    pub mnt_ns: u32,
    pub comm: RawString,
    pub cgroup_id: u64,
}

/// The syscall and its arguments. `dfd`/`fd` arguments are as passed (`AT_FDCWD` is -100).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    Mount {
        source: RawString,
        target: RawString,
        fstype: RawString,
        flags: u64,
    },
    Umount {
        target: RawString,
        flags: u64,
    },
    OpenTree {
        dfd: i32,
        path: RawString,
        flags: u64,
    },
    OpenTreeAttr {
        dfd: i32,
        path: RawString,
        flags: u64,
    },
    MoveMount {
        from_dfd: i32,
        from_path: RawString,
        to_dfd: i32,
        to_path: RawString,
        flags: u64,
    },
    Fsopen {
        fs_name: RawString,
        flags: u64,
    },
    /// `value` is deliberately not captured: it can hold credentials.
    Fsconfig {
        fd: i32,
        cmd: u32,
        key: RawString,
        aux: i32,
    },
    Fsmount {
        fs_fd: i32,
        flags: u64,
        attr_flags: u64,
    },
    Fspick {
        dfd: i32,
        path: RawString,
        flags: u64,
    },
    MountSetattr {
        dfd: i32,
        path: RawString,
        flags: u64,
    },
}

impl Call {
    /// The syscall's name.
    pub fn name(&self) -> &'static str {
        match self {
            Call::Mount { .. } => "mount",
            Call::Umount { .. } => "umount2",
            Call::OpenTree { .. } => "open_tree",
            Call::OpenTreeAttr { .. } => "open_tree_attr",
            Call::MoveMount { .. } => "move_mount",
            Call::Fsopen { .. } => "fsopen",
            Call::Fsconfig { .. } => "fsconfig",
            Call::Fsmount { .. } => "fsmount",
            Call::Fspick { .. } => "fspick",
            Call::MountSetattr { .. } => "mount_setattr",
        }
    }
}

/// Bytes as the kernel saw them (paths need not be UTF-8), and whether the kernel cut
/// them at their bound.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct RawString {
    pub bytes: Vec<u8>,
    pub truncated: bool,
}

impl RawString {
    /// Takes the bytes of a NUL-terminated (or NUL-padded, or full) buffer.
    pub fn from_nul_padded(buf: &[u8], truncated: bool) -> Self {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Self { bytes: buf[..end].to_vec(), truncated }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl From<&str> for RawString {
    fn from(s: &str) -> Self {
        Self { bytes: s.as_bytes().to_vec(), truncated: false }
    }
}

impl fmt::Display for RawString {
    /// Valid UTF-8 is shown as is (control characters, `\` and `"` escaped), other bytes
    /// as `\xNN`; a cut string ends in `…`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.bytes.utf8_chunks() {
            for c in chunk.valid().chars() {
                if c.is_control() || c == '\\' || c == '"' {
                    write!(f, "{}", c.escape_default())?;
                } else {
                    write!(f, "{c}")?;
                }
            }
            for byte in chunk.invalid() {
                write!(f, "\\x{byte:02x}")?;
            }
        }
        if self.truncated {
            write!(f, "…")?;
        }
        Ok(())
    }
}

impl fmt::Debug for RawString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

/// Why a record could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// The record is shorter than its struct.
    #[error("record is {len} bytes, expected at least {need}")]
    TooShort { len: usize, need: usize },
    /// The header's kind is not one this agent knows.
    #[error("unknown event kind {0}")]
    UnknownKind(u32),
}

/// Decodes one ring-buffer record.
pub fn parse(record: &[u8]) -> Result<Record, DecodeError> {
    let kind = record.get(..4).map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    if kind == Some(CONFLICT_EVENT_KIND) {
        return parse_conflict(record).map(Record::Conflict);
    }
    parse_syscall(record).map(Record::Syscall)
}

/// Copies a plain-old-data record out of possibly unaligned bytes after a length check.
fn read_record<T: aya::Pod>(record: &[u8]) -> Result<T, DecodeError> {
    let need = size_of::<T>();
    if record.len() < need {
        return Err(DecodeError::TooShort { len: record.len(), need });
    }
    // SAFETY: length checked above; `T: Pod` means every bit pattern is valid.
    Ok(unsafe { std::ptr::read_unaligned(record.as_ptr().cast::<T>()) })
}

/// [`LsmConflict::hook`] of a clone of an owned tree taken by another pod (the new mount API).
pub const CLONE_HOOK: &str = "move_mount of a tree inside the volume";

/// [`LsmConflict::hook`] of an open of an owned volume's file by another pod.
pub const OPEN_HOOK: &str = "file_open";

/// What another pod tried where [`LsmConflict::hook`] is one of the path hooks that guard
/// an owned volume's names and attributes (`unlink a file of`), else `None`.
pub fn operation_tried(hook: &str) -> Option<&'static str> {
    OPERATION_HOOKS.iter().find(|(name, ..)| *name == hook).map(|(_, _, tried)| *tried)
}

fn parse_conflict(record: &[u8]) -> Result<LsmConflict, DecodeError> {
    let raw: ConflictEvent = read_record(record)?;
    let text = |bytes: &[u8]| RawString::from_nul_padded(bytes, false);
    Ok(LsmConflict {
        blocked: raw.action == conflict_action::BLOCKED,
        hook: match raw.hook {
            conflict_hook::MOVE_MOUNT => "move_mount",
            conflict_hook::MOVE_MOUNT_SOURCE => CLONE_HOOK,
            conflict_hook::FILE_OPEN => OPEN_HOOK,
            other => OPERATION_HOOKS.iter().find(|(_, value, _)| *value == other).map_or("sb_mount", |(hook, ..)| hook),
        },
        caller: Caller { pid: raw.pid, tgid: raw.tgid, mnt_ns: 0, comm: text(&raw.comm), cgroup_id: raw.cgroup_id },
        time_ns: raw.time_ns,
        volume: text(&raw.volume.name),
        owner: text(&raw.owner.uid),
        attempted_by: text(&raw.attempted_by.uid),
    })
}

fn parse_syscall(record: &[u8]) -> Result<Event, DecodeError> {
    let raw: SyscallEvent = read_record(record)?;
    let call = decode_call(&raw)?;
    let h = &raw.header;
    Ok(Event { caller: Caller::from_header(h), start_ns: h.start_ns, duration_ns: h.duration_ns, ret: h.ret, call })
}

fn decode_call(raw: &SyscallEvent) -> Result<Call, DecodeError> {
    let cut = raw.header.truncated;
    let path0 = || RawString::from_nul_padded(&raw.path0, cut & truncated::PATH0 != 0);
    let path1 = || RawString::from_nul_padded(&raw.path1, cut & truncated::PATH1 != 0);
    let name = || RawString::from_nul_padded(&raw.name, cut & truncated::NAME != 0);
    let a = raw.args;
    // Integer arguments narrower than 64 bits are the low bits of their slot.
    let int = |i: usize| a[i] as i32;
    Ok(match raw.header.kind {
        kind::MOUNT => Call::Mount { source: path0(), target: path1(), fstype: name(), flags: a[3] },
        kind::UMOUNT => Call::Umount { target: path0(), flags: a[1] },
        kind::OPEN_TREE => Call::OpenTree { dfd: int(0), path: path0(), flags: a[2] },
        kind::OPEN_TREE_ATTR => Call::OpenTreeAttr { dfd: int(0), path: path0(), flags: a[2] },
        kind::MOVE_MOUNT => {
            Call::MoveMount { from_dfd: int(0), from_path: path0(), to_dfd: int(2), to_path: path1(), flags: a[4] }
        }
        kind::FSOPEN => Call::Fsopen { fs_name: name(), flags: a[1] },
        kind::FSCONFIG => Call::Fsconfig { fd: int(0), cmd: a[1] as u32, key: name(), aux: int(4) },
        kind::FSMOUNT => Call::Fsmount { fs_fd: int(0), flags: a[1], attr_flags: a[2] },
        kind::FSPICK => Call::Fspick { dfd: int(0), path: path0(), flags: a[2] },
        kind::MOUNT_SETATTR => Call::MountSetattr { dfd: int(0), path: path0(), flags: a[2] },
        other => return Err(DecodeError::UnknownKind(other)),
    })
}

impl Caller {
    fn from_header(h: &EventHeader) -> Self {
        Self {
            pid: h.pid,
            tgid: h.tgid,
            mnt_ns: h.mnt_ns,
            comm: RawString::from_nul_padded(&h.comm, false),
            cgroup_id: h.cgroup_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use volguard_common::event::{COMM_LEN, MAX_ARGS, NAME_LEN, PATH_LEN, SYSCALLS};

    use super::*;

    fn padded<const N: usize>(s: &[u8]) -> [u8; N] {
        let mut buf = [0u8; N];
        buf[..s.len()].copy_from_slice(s);
        buf
    }

    fn raw(kind: u32, args: [u64; MAX_ARGS], path0: &[u8], path1: &[u8], name: &[u8], cut: u32) -> SyscallEvent {
        SyscallEvent {
            header: EventHeader {
                kind,
                truncated: cut,
                pid: 11,
                tgid: 10,
                mnt_ns: 4026531841,
                _pad: 0,
                cgroup_id: 4242,
                start_ns: 1_000,
                duration_ns: 2_500,
                ret: -2,
                comm: padded::<COMM_LEN>(b"mount"),
            },
            args,
            path0: padded::<PATH_LEN>(path0),
            path1: padded::<PATH_LEN>(path1),
            name: padded::<NAME_LEN>(name),
        }
    }

    fn syscall(bytes: &[u8]) -> Result<Event, DecodeError> {
        match parse(bytes)? {
            Record::Syscall(e) => Ok(e),
            other => panic!("not a syscall: {other:?}"),
        }
    }

    fn bytes_of(value: &SyscallEvent) -> Vec<u8> {
        // SAFETY: Pod values are plain bytes.
        unsafe { std::slice::from_raw_parts((value as *const SyscallEvent).cast::<u8>(), size_of::<SyscallEvent>()) }
            .to_vec()
    }

    #[test]
    fn a_call_returned_when_its_kernel_stamps_say_not_when_it_is_read() {
        let now_ns = crate::sys::clock::monotonic_now_ns().expect("the monotonic clock");
        // Entered 2 s ago, returned half a second later: 1.5 s ago.
        let mut record = raw(kind::UMOUNT, [0; MAX_ARGS], b"/mnt", b"", b"", 0);
        (record.header.start_ns, record.header.duration_ns) = (now_ns - 2_000_000_000, 500_000_000);
        let e = syscall(&bytes_of(&record)).unwrap();
        let ago = SystemTime::now().duration_since(e.returned_at()).unwrap();
        assert!(ago.as_secs_f64() > 1.45 && ago.as_secs_f64() < 1.6, "{ago:?}");
    }

    #[test]
    fn round_trips_the_header_and_a_mount() {
        let record = raw(kind::MOUNT, [0, 0, 0, 4096, 0, 0], b"/dev/vdb1", b"/mnt", b"ext4", truncated::PATH1);
        let e = syscall(&bytes_of(&record)).unwrap();
        assert_eq!((e.caller.pid, e.caller.tgid, e.caller.cgroup_id, e.caller.mnt_ns), (11, 10, 4242, 4026531841));
        assert_eq!(e.caller.comm.as_bytes(), b"mount");
        assert_eq!((e.start_ns, e.duration_ns, e.ret), (1_000, 2_500, -2));
        let Call::Mount { source, target, fstype, flags } = e.call else { panic!("{:?}", e.call) };
        assert_eq!((source.as_bytes(), fstype.as_bytes(), flags), (&b"/dev/vdb1"[..], &b"ext4"[..], 4096));
        assert_eq!(target, RawString { bytes: b"/mnt".to_vec(), truncated: true });
        assert!(!source.truncated && !fstype.truncated);
    }

    #[test]
    fn every_kind_puts_arguments_in_the_right_fields() {
        let args = [(-100i64) as u64, 0, 7, 0, 0x44, 0];
        let decode = |kind| syscall(&bytes_of(&raw(kind, args, b"/p0", b"/p1", b"key", 0))).unwrap().call;
        let (p0, p1, name) = (RawString::from("/p0"), RawString::from("/p1"), RawString::from("key"));
        assert_eq!(decode(kind::UMOUNT), Call::Umount { target: p0.clone(), flags: 0 });
        assert_eq!(decode(kind::OPEN_TREE), Call::OpenTree { dfd: -100, path: p0.clone(), flags: 7 });
        assert_eq!(decode(kind::OPEN_TREE_ATTR), Call::OpenTreeAttr { dfd: -100, path: p0.clone(), flags: 7 });
        assert_eq!(
            decode(kind::MOVE_MOUNT),
            Call::MoveMount { from_dfd: -100, from_path: p0.clone(), to_dfd: 7, to_path: p1, flags: 0x44 }
        );
        assert_eq!(decode(kind::FSOPEN), Call::Fsopen { fs_name: name.clone(), flags: 0 });
        assert_eq!(decode(kind::FSCONFIG), Call::Fsconfig { fd: -100, cmd: 0, key: name, aux: 0x44 });
        assert_eq!(decode(kind::FSMOUNT), Call::Fsmount { fs_fd: -100, flags: 0, attr_flags: 7 });
        assert_eq!(decode(kind::FSPICK), Call::Fspick { dfd: -100, path: p0.clone(), flags: 7 });
        assert_eq!(decode(kind::MOUNT_SETATTR), Call::MountSetattr { dfd: -100, path: p0, flags: 7 });
    }

    #[test]
    fn every_spec_kind_decodes_and_names_its_syscall() {
        for spec in SYSCALLS {
            let call = syscall(&bytes_of(&raw(spec.kind, [0; MAX_ARGS], b"", b"", b"", 0))).unwrap().call;
            assert_eq!(call.name().trim_end_matches('2'), spec.name, "umount2's tracepoint is `umount`");
        }
    }

    #[test]
    fn ring_buffer_padding_after_the_record_is_ignored() {
        let mut bytes = bytes_of(&raw(kind::MOUNT, [0; MAX_ARGS], b"", b"", b"", 0));
        bytes.extend_from_slice(&[0xff; 8]);
        assert!(syscall(&bytes).is_ok());
    }

    #[test]
    fn short_and_unknown_records_are_errors_not_panics() {
        let bytes = bytes_of(&raw(kind::MOUNT, [0; MAX_ARGS], b"", b"", b"", 0));
        let need = size_of::<SyscallEvent>();
        assert_eq!(parse(&[]), Err(DecodeError::TooShort { len: 0, need }));
        assert_eq!(parse(&bytes[..100]), Err(DecodeError::TooShort { len: 100, need }));
        let mut unknown = bytes;
        unknown[..4].copy_from_slice(&7u32.to_ne_bytes());
        assert_eq!(parse(&unknown), Err(DecodeError::UnknownKind(7)));
        let short_conflict = CONFLICT_EVENT_KIND.to_ne_bytes();
        let need = size_of::<ConflictEvent>();
        assert_eq!(parse(&short_conflict), Err(DecodeError::TooShort { len: 4, need }));
    }

    #[test]
    fn conflict_records_name_the_volume_and_both_pods() {
        use volguard_common::enforce::{PodUid, VolumeKey};
        let raw = ConflictEvent {
            kind: CONFLICT_EVENT_KIND,
            action: conflict_action::BLOCKED,
            hook: conflict_hook::MOVE_MOUNT,
            pid: 5,
            tgid: 4,
            _pad: 0,
            cgroup_id: 9,
            time_ns: 77,
            comm: padded::<COMM_LEN>(b"csi-node"),
            volume: VolumeKey { name: padded(b"pvc-1") },
            owner: PodUid { uid: padded(b"pod-a") },
            attempted_by: PodUid { uid: padded(b"pod-b") },
        };
        // SAFETY: Pod values are plain bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts((&raw as *const ConflictEvent).cast::<u8>(), size_of::<ConflictEvent>())
        };
        let Ok(Record::Conflict(c)) = parse(bytes) else { panic!() };
        assert!(c.blocked);
        assert_eq!((c.hook, c.caller.pid, c.caller.tgid, c.time_ns), ("move_mount", 5, 4, 77));
        let hook_of = |hook: u32| {
            let mut bytes = bytes.to_vec();
            let at = std::mem::offset_of!(ConflictEvent, hook);
            bytes[at..at + 4].copy_from_slice(&hook.to_ne_bytes());
            let Ok(Record::Conflict(c)) = parse(&bytes) else { panic!() };
            c.hook
        };
        assert_eq!(hook_of(conflict_hook::FILE_OPEN), OPEN_HOOK, "the open guard's refusals are told apart");
        assert_eq!(hook_of(conflict_hook::MOVE_MOUNT_SOURCE), CLONE_HOOK);
        assert_eq!(hook_of(conflict_hook::PATH_RENAME), "path_rename", "each operation is told apart");
        assert_eq!(operation_tried(hook_of(conflict_hook::PATH_UNLINK)), Some("unlink a file of"));
        assert_eq!(operation_tried(OPEN_HOOK), None);
        assert_eq!(
            (c.volume.to_string(), c.owner.to_string(), c.attempted_by.to_string()),
            ("pvc-1".into(), "pod-a".into(), "pod-b".into())
        );
    }

    #[test]
    fn a_full_buffer_without_nul_keeps_every_byte() {
        assert_eq!(RawString::from_nul_padded(b"abc", false).as_bytes(), b"abc");
        assert_eq!(RawString::from_nul_padded(b"ab\0c", false).as_bytes(), b"ab");
    }

    #[test]
    fn odd_bytes_are_escaped_when_shown() {
        let s = RawString { bytes: b"/var/lib/a b\n\xff\"\\".to_vec(), truncated: false };
        assert_eq!(s.to_string(), r#"/var/lib/a b\n\xff\"\\"#);
        assert_eq!(RawString::from("/ü").to_string(), "/ü");
        assert_eq!(RawString { bytes: b"/long".to_vec(), truncated: true }.to_string(), "/long…");
    }

    proptest::proptest! {
        /// Hostile or torn records: any bytes decode to a record or an error, never a panic.
        #[test]
        fn any_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2048)) {
            let _ = parse(&bytes);
        }
    }
}

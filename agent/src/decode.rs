//! Pure decoding of ring-buffer records into owned events. Never panics on bad input:
//! short or unknown records become a [`DecodeError`] the caller counts.

use std::{fmt, mem::size_of};

use volguard_common::event::{COMM_LEN, EventHeader, MountEvent, kind, truncated};

/// A decoded kernel event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Mount(Mount),
}

/// Who made a syscall, when, and with what result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub pid: u32,
    pub tgid: u32,
    pub comm: RawString,
    pub cgroup_id: u64,
}

/// One `mount(2)` call, entry and exit paired in the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub caller: Caller,
    pub start_ns: u64,
    pub duration_ns: u64,
    /// 0 on success, otherwise the negative errno.
    pub ret: i64,
    pub flags: u64,
    pub source: RawString,
    pub target: RawString,
    pub fstype: RawString,
    pub source_truncated: bool,
    pub target_truncated: bool,
    pub fstype_truncated: bool,
}

/// Bytes as the kernel saw them: paths need not be UTF-8.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct RawString(pub Vec<u8>);

impl RawString {
    /// Takes the bytes of a NUL-terminated (or NUL-padded, or full) buffer.
    pub fn from_nul_padded(buf: &[u8]) -> Self {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Self(buf[..end].to_vec())
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Display for RawString {
    /// Valid UTF-8 is shown as is (control characters escaped), other bytes as `\xNN`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.0.utf8_chunks() {
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
    /// The record is shorter than its kind's struct.
    #[error("record of kind {kind} is {len} bytes, expected at least {need}")]
    TooShort { kind: u32, len: usize, need: usize },
    /// The header's kind is not one this agent knows.
    #[error("unknown event kind {0}")]
    UnknownKind(u32),
}

/// Decodes one ring-buffer record.
pub fn parse(record: &[u8]) -> Result<Event, DecodeError> {
    let kind = record
        .get(..4)
        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or(DecodeError::TooShort {
            kind: 0,
            len: record.len(),
            need: size_of::<EventHeader>(),
        })?;
    match kind {
        kind::MOUNT => {
            let raw: MountEvent = read_record(record, kind)?;
            Ok(Event::Mount(Mount::from_raw(&raw)))
        }
        other => Err(DecodeError::UnknownKind(other)),
    }
}

/// Copies a plain-old-data record out of possibly unaligned bytes after a length check.
fn read_record<T: aya::Pod>(record: &[u8], kind: u32) -> Result<T, DecodeError> {
    let need = size_of::<T>();
    if record.len() < need {
        return Err(DecodeError::TooShort {
            kind,
            len: record.len(),
            need,
        });
    }
    // SAFETY: length checked above; `T: Pod` means every bit pattern is valid.
    Ok(unsafe { std::ptr::read_unaligned(record.as_ptr().cast::<T>()) })
}

impl Caller {
    fn from_header(h: &EventHeader) -> Self {
        let comm: &[u8; COMM_LEN] = &h.comm;
        Self {
            pid: h.pid,
            tgid: h.tgid,
            comm: RawString::from_nul_padded(comm),
            cgroup_id: h.cgroup_id,
        }
    }
}

impl Mount {
    fn from_raw(raw: &MountEvent) -> Self {
        let h = &raw.header;
        Self {
            caller: Caller::from_header(h),
            start_ns: h.start_ns,
            duration_ns: h.duration_ns,
            ret: h.ret,
            flags: raw.flags,
            source: RawString::from_nul_padded(&raw.source),
            target: RawString::from_nul_padded(&raw.target),
            fstype: RawString::from_nul_padded(&raw.fstype),
            source_truncated: h.truncated & truncated::SOURCE != 0,
            target_truncated: h.truncated & truncated::TARGET != 0,
            fstype_truncated: h.truncated & truncated::FSTYPE != 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use volguard_common::event::{FSTYPE_LEN, PATH_LEN};

    use super::*;

    fn raw_mount() -> MountEvent {
        let mut source = [0u8; PATH_LEN];
        source[..9].copy_from_slice(b"/dev/vdb1");
        let mut target = [0u8; PATH_LEN];
        target[..4].copy_from_slice(b"/mnt");
        let mut fstype = [0u8; FSTYPE_LEN];
        fstype[..4].copy_from_slice(b"ext4");
        let mut comm = [0u8; COMM_LEN];
        comm[..5].copy_from_slice(b"mount");
        MountEvent {
            header: EventHeader {
                kind: kind::MOUNT,
                truncated: truncated::TARGET,
                pid: 11,
                tgid: 10,
                cgroup_id: 4242,
                start_ns: 1_000,
                duration_ns: 2_500,
                ret: -2,
                comm,
            },
            flags: 4096,
            source,
            target,
            fstype,
        }
    }

    fn bytes_of<T: aya::Pod>(value: &T) -> Vec<u8> {
        // SAFETY: Pod values are plain bytes.
        unsafe { std::slice::from_raw_parts((value as *const T).cast::<u8>(), size_of::<T>()) }
            .to_vec()
    }

    #[test]
    fn round_trips_every_mount_field() {
        let Event::Mount(m) = parse(&bytes_of(&raw_mount())).unwrap();
        assert_eq!(
            (m.caller.pid, m.caller.tgid, m.caller.cgroup_id),
            (11, 10, 4242)
        );
        assert_eq!(m.caller.comm.as_bytes(), b"mount");
        assert_eq!(
            (m.start_ns, m.duration_ns, m.ret, m.flags),
            (1_000, 2_500, -2, 4096)
        );
        assert_eq!(m.source.as_bytes(), b"/dev/vdb1");
        assert_eq!(m.target.as_bytes(), b"/mnt");
        assert_eq!(m.fstype.as_bytes(), b"ext4");
        assert!(m.target_truncated && !m.source_truncated && !m.fstype_truncated);
    }

    #[test]
    fn ring_buffer_padding_after_the_record_is_ignored() {
        let mut bytes = bytes_of(&raw_mount());
        bytes.extend_from_slice(&[0xff; 8]);
        assert!(parse(&bytes).is_ok());
    }

    #[test]
    fn short_and_unknown_records_are_errors_not_panics() {
        let bytes = bytes_of(&raw_mount());
        assert_eq!(
            parse(&[]),
            Err(DecodeError::TooShort {
                kind: 0,
                len: 0,
                need: 64
            })
        );
        assert_eq!(
            parse(&bytes[..3]).unwrap_err(),
            DecodeError::TooShort {
                kind: 0,
                len: 3,
                need: 64
            }
        );
        let need = size_of::<MountEvent>();
        assert_eq!(
            parse(&bytes[..100]),
            Err(DecodeError::TooShort {
                kind: kind::MOUNT,
                len: 100,
                need
            })
        );
        let mut unknown = bytes;
        unknown[..4].copy_from_slice(&7u32.to_ne_bytes());
        assert_eq!(parse(&unknown), Err(DecodeError::UnknownKind(7)));
    }

    #[test]
    fn a_full_buffer_without_nul_keeps_every_byte() {
        assert_eq!(RawString::from_nul_padded(b"abc").as_bytes(), b"abc");
        assert_eq!(RawString::from_nul_padded(b"ab\0c").as_bytes(), b"ab");
    }

    #[test]
    fn odd_bytes_are_escaped_when_shown() {
        let s = RawString(b"/var/lib/a b\n\xff\"\\".to_vec());
        assert_eq!(s.to_string(), r#"/var/lib/a b\n\xff\"\\"#);
        assert_eq!(RawString("/ü".as_bytes().to_vec()).to_string(), "/ü");
    }
}

//! One readable line per event for `volguard trace`.

use nix::errno::Errno;

use crate::{
    decode::{Event, Mount, RawString},
    mount_flags,
};

/// Renders an event as a single line (no trailing newline).
pub fn line(event: &Event) -> String {
    match event {
        Event::Mount(m) => mount_line(m),
    }
}

fn mount_line(m: &Mount) -> String {
    let c = &m.caller;
    format!(
        "mount  {result:<14} {duration:>10}  pid={pid} tgid={tgid} comm={comm} cgroup={cgroup}  \
         source={source} target={target} fstype={fstype} flags={flags}",
        result = result(m.ret),
        duration = duration(m.duration_ns),
        pid = c.pid,
        tgid = c.tgid,
        comm = quoted(&c.comm, false),
        cgroup = c.cgroup_id,
        source = quoted(&m.source, m.source_truncated),
        target = quoted(&m.target, m.target_truncated),
        fstype = quoted(&m.fstype, m.fstype_truncated),
        flags = mount_flags::describe(m.flags),
    )
}

/// `ok`, or the errno name and number for a failed syscall.
pub fn result(ret: i64) -> String {
    if ret >= 0 {
        return "ok".to_owned();
    }
    match ret.checked_neg().and_then(|n| i32::try_from(n).ok()) {
        Some(n) => format!("{:?}({n})", Errno::from_raw(n)),
        None => format!("error({ret})"),
    }
}

/// Human duration with a unit that keeps three significant digits.
pub fn duration(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns}ns"),
        1_000..1_000_000 => format!("{:.1}µs", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2}ms", ns as f64 / 1e6),
        _ => format!("{:.3}s", ns as f64 / 1e9),
    }
}

/// Quotes a string; a `…` inside the quotes marks one the kernel cut at its bound.
fn quoted(s: &RawString, truncated: bool) -> String {
    format!("\"{s}{}\"", if truncated { "…" } else { "" })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::Caller;

    #[test]
    fn mount_line_names_every_field() {
        let m = Mount {
            caller: Caller {
                pid: 7,
                tgid: 6,
                comm: RawString(b"kubelet".to_vec()),
                cgroup_id: 99,
            },
            start_ns: 0,
            duration_ns: 12_345,
            ret: -16,
            flags: volguard_common::mount_flags::MS_BIND,
            source: RawString(b"/a b".to_vec()),
            target: RawString(b"/t".to_vec()),
            fstype: RawString::default(),
            source_truncated: false,
            target_truncated: true,
            fstype_truncated: false,
        };
        let line = line(&Event::Mount(m));
        assert!(line.starts_with("mount  EBUSY(16)"), "{line}");
        for part in [
            "12.3µs",
            "pid=7 tgid=6",
            "comm=\"kubelet\"",
            "cgroup=99",
            "source=\"/a b\"",
            "target=\"/t…\"",
            "fstype=\"\"",
            "flags=MS_BIND",
        ] {
            assert!(line.contains(part), "{part} missing from {line}");
        }
    }

    #[test]
    fn results_and_durations() {
        assert_eq!(result(0), "ok");
        assert_eq!(result(-2), "ENOENT(2)");
        assert_eq!(result(i64::MIN), "error(-9223372036854775808)");
        assert_eq!(result(-4096), "UnknownErrno(4096)");
        assert_eq!(duration(999), "999ns");
        assert_eq!(duration(1_500_000), "1.50ms");
        assert_eq!(duration(2_000_000_000), "2.000s");
    }
}

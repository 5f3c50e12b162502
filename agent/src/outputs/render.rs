//! One readable line per event for `volguard trace`.

use nix::errno::Errno;
use volguard_common::mount_api::{
    FSMOUNT_NAMES, FSOPEN_NAMES, FSPICK_NAMES, MOUNT_ATTR_NAMES, MOUNT_SETATTR_NAMES, MOVE_MOUNT_NAMES,
    OPEN_TREE_NAMES, UMOUNT_NAMES,
};

use crate::{
    kernel::decode::{Call, Event, LsmConflict, RawString, Record},
    kernel::flags::{self, describe, dfd},
};

/// Renders a record as a single line (no trailing newline).
pub fn record(record: &Record) -> String {
    match record {
        Record::Syscall(event) => line(event),
        Record::Conflict(c) => conflict(c),
    }
}

/// `CONFLICT blocked ...`: a refused (or, in audit mode, reported) publish, clone or open.
pub fn conflict(c: &LsmConflict) -> String {
    use crate::kernel::decode::{CLONE_HOOK, OPEN_HOOK, operation_tried};
    let changed = operation_tried(c.hook);
    let opened = c.hook == OPEN_HOOK || changed.is_some();
    format!(
        "CONFLICT {action} {hook}: volume {volume} is owned by pod {owner}; pod {attempted} tried to {what} it \
         (pid={pid} comm={comm})",
        action = match (c.blocked, opened) {
            (true, true) => "blocked (EACCES)",
            (true, false) => "blocked (EBUSY)",
            (false, _) => "audited (allowed)",
        },
        what = if let Some(tried) = changed {
            tried
        } else if opened {
            "open a file of"
        } else if c.hook == CLONE_HOOK {
            "clone"
        } else {
            "publish"
        },
        hook = c.hook,
        volume = quoted(&c.volume),
        owner = c.owner,
        attempted = c.attempted_by,
        pid = c.caller.pid,
        comm = quoted(&c.caller.comm),
    )
}

/// Renders an event as a single line (no trailing newline).
pub fn line(event: &Event) -> String {
    let c = &event.caller;
    format!(
        "{name:<14} {result:<14} {duration:>10}  pid={pid} tgid={tgid} comm={comm} cgroup={cgroup}  {args}",
        name = event.call.name(),
        result = result(event.ret),
        duration = duration(event.duration_ns),
        pid = c.pid,
        tgid = c.tgid,
        comm = quoted(&c.comm),
        cgroup = c.cgroup_id,
        args = arguments(&event.call),
    )
}

fn arguments(call: &Call) -> String {
    match call {
        Call::Mount { source, target, fstype, flags } => format!(
            "source={} target={} fstype={} flags={}",
            quoted(source),
            quoted(target),
            quoted(fstype),
            flags::mount(*flags)
        ),
        Call::Umount { target, flags } => format!("target={} flags={}", quoted(target), describe(*flags, UMOUNT_NAMES)),
        Call::OpenTree { dfd: fd, path, flags } | Call::OpenTreeAttr { dfd: fd, path, flags } => {
            format!("dfd={} path={} flags={}", dfd(*fd), quoted(path), describe(*flags, OPEN_TREE_NAMES))
        }
        Call::MoveMount { from_dfd, from_path, to_dfd, to_path, flags } => format!(
            "from={}:{} to={}:{} flags={}",
            dfd(*from_dfd),
            quoted(from_path),
            dfd(*to_dfd),
            quoted(to_path),
            describe(*flags, MOVE_MOUNT_NAMES)
        ),
        Call::Fsopen { fs_name, flags } => format!("fs={} flags={}", quoted(fs_name), describe(*flags, FSOPEN_NAMES)),
        Call::Fsconfig { fd, cmd, key, aux } => {
            format!("fd={fd} cmd={} key={} aux={aux}", flags::fsconfig_cmd(*cmd), quoted(key))
        }
        Call::Fsmount { fs_fd, flags, attr_flags } => format!(
            "fs_fd={fs_fd} flags={} attr={}",
            describe(*flags, FSMOUNT_NAMES),
            describe(*attr_flags, MOUNT_ATTR_NAMES)
        ),
        Call::Fspick { dfd: fd, path, flags } => {
            format!("dfd={} path={} flags={}", dfd(*fd), quoted(path), describe(*flags, FSPICK_NAMES))
        }
        Call::MountSetattr { dfd: fd, path, flags } => {
            format!("dfd={} path={} flags={}", dfd(*fd), quoted(path), describe(*flags, MOUNT_SETATTR_NAMES))
        }
    }
}

/// `ok` (with the value when it is an fd), or the errno name and number.
pub fn result(ret: i64) -> String {
    if ret > 0 {
        return format!("ok={ret}");
    }
    if ret == 0 {
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

/// Quoted; a string the kernel cut at its bound ends in `…` inside the quotes.
fn quoted(s: &RawString) -> String {
    format!("\"{s}\"")
}

#[cfg(test)]
mod tests {
    use volguard_common::mount_api::{AT_FDCWD, MOVE_MOUNT_F_EMPTY_PATH};

    use super::*;
    use crate::kernel::decode::Caller;

    fn event(call: Call, ret: i64) -> Event {
        let caller = Caller { pid: 7, tgid: 6, mnt_ns: 0, comm: RawString::from("kubelet"), cgroup_id: 99 };
        Event { caller, start_ns: 0, duration_ns: 12_345, ret, call }
    }

    #[test]
    fn mount_line_names_every_field() {
        let call = Call::Mount {
            source: RawString::from("/a b"),
            target: RawString { bytes: b"/t".to_vec(), truncated: true },
            fstype: RawString::default(),
            flags: volguard_common::mount_flags::MS_BIND,
        };
        let line = line(&event(call, -16));
        assert!(line.starts_with("mount          EBUSY(16)"), "{line}");
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
    fn new_api_lines_show_fds_and_flag_names() {
        let call = Call::MoveMount {
            from_dfd: 5,
            from_path: RawString::default(),
            to_dfd: AT_FDCWD,
            to_path: RawString::from("/mnt"),
            flags: MOVE_MOUNT_F_EMPTY_PATH,
        };
        let line = line(&event(call, 0));
        assert!(line.contains("from=5:\"\" to=AT_FDCWD:\"/mnt\" flags=MOVE_MOUNT_F_EMPTY_PATH"), "{line}");
        let fsconfig = line_of(Call::Fsconfig { fd: 3, cmd: 1, key: RawString::from("size"), aux: 0 });
        assert!(fsconfig.contains("fd=3 cmd=FSCONFIG_SET_STRING key=\"size\" aux=0"), "{fsconfig}");
    }

    fn line_of(call: Call) -> String {
        line(&event(call, 3))
    }

    #[test]
    fn results_and_durations() {
        assert_eq!(result(0), "ok");
        assert_eq!(result(5), "ok=5");
        assert_eq!(result(-2), "ENOENT(2)");
        assert_eq!(result(i64::MIN), "error(-9223372036854775808)");
        assert_eq!(result(-4096), "UnknownErrno(4096)");
        assert_eq!(duration(999), "999ns");
        assert_eq!(duration(1_500_000), "1.50ms");
        assert_eq!(duration(2_000_000_000), "2.000s");
    }
}

//! The oldest kernel volguard runs on, and what an older one lacks: asked only when the
//! object fails to load, so that the user reads one line naming the missing feature and
//! the minimum version instead of a map or verifier error.

use aya::maps::MapType;

/// The oldest kernel volguard runs on.
pub const MINIMUM: &str = "5.13";

/// Why this kernel is below [`MINIMUM`], as one line; `None` when it is not (then the
/// load failed for another reason, reported as it is).
pub fn below_floor() -> Option<String> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?.trim().to_owned();
    // Each traced syscall's state lives in its thread's task storage (Linux 5.11), which
    // tracing programs may use since 5.13.
    let task_storage = aya::sys::is_map_supported(MapType::TaskStorage).unwrap_or(true);
    let missing = if !task_storage {
        Some("has no BPF task storage (BPF_MAP_TYPE_TASK_STORAGE)")
    } else if older_than(&release, (5, 13)) {
        Some("does not let tracing programs use BPF task storage")
    } else {
        None
    }?;
    Some(format!(
        "this kernel ({release}) {missing}, where volguard keeps each traced mount syscall's state: \
         volguard needs Linux {MINIMUM} or later"
    ))
}

/// Whether the `major.minor` at the start of `release` is below `floor`.
fn older_than(release: &str, floor: (u32, u32)) -> bool {
    let mut numbers = release.split(|c: char| !c.is_ascii_digit()).map(|n| n.parse::<u32>().ok());
    match (numbers.next().flatten(), numbers.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) < floor,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::older_than;

    #[test]
    fn releases_compare_by_major_and_minor() {
        assert!(older_than("5.10.0-32-cloud-amd64", (5, 13)));
        assert!(older_than("5.12.19", (5, 13)));
        assert!(!older_than("5.13.0", (5, 13)));
        assert!(!older_than("6.1.0-56-cloud-amd64", (5, 13)));
        assert!(!older_than("7.3.4+deb13-cloud-amd64", (5, 13)));
        assert!(!older_than("garbage", (5, 13)));
    }
}

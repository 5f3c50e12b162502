//! The kernel's monotonic clock (what BPF programs stamp records with, `bpf_ktime_get_ns`)
//! told as wall-clock time.

use std::time::{Duration, SystemTime};

use nix::time::{ClockId, clock_gettime};

/// The kernel's monotonic clock now, in ns (the clock `bpf_ktime_get_ns` reads).
pub fn monotonic_now_ns() -> nix::Result<u64> {
    let now = clock_gettime(ClockId::CLOCK_MONOTONIC)?;
    Ok(u64::try_from(Duration::from(now).as_nanos()).unwrap_or(u64::MAX))
}

/// The wall-clock time at which the monotonic clock read `monotonic_ns`: now, less how far
/// the monotonic clock has run since. A stamp from the future (not made by this clock)
/// is taken for now.
pub fn wall_time_of_monotonic(monotonic_ns: u64) -> SystemTime {
    let wall_now = SystemTime::now();
    let Ok(mono_now_ns) = monotonic_now_ns() else { return wall_now };
    let since = Duration::from_nanos(mono_now_ns.saturating_sub(monotonic_ns));
    wall_now.checked_sub(since).unwrap_or(wall_now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_taken_a_while_ago_is_that_long_before_now() {
        let stamp = monotonic_now_ns().unwrap() - 250_000_000;
        let told = wall_time_of_monotonic(stamp);
        let ago = SystemTime::now().duration_since(told).unwrap();
        assert!(ago >= Duration::from_millis(250) && ago < Duration::from_millis(350), "{ago:?}");
    }

    #[test]
    fn a_stamp_from_the_future_is_now() {
        let told = wall_time_of_monotonic(monotonic_now_ns().unwrap() + 3_600_000_000_000);
        let gap = SystemTime::now().duration_since(told).unwrap_or_default();
        assert!(gap < Duration::from_secs(1), "{gap:?}");
    }
}

//! The self-test of in-kernel refusal on `sb_mount`: counts every run and refuses a bind
//! mount of the single source path userspace put in `LSM_PROBE_SOURCE`. Userspace proves
//! that BPF LSM (or its fmod_ret twin on `security_sb_mount`) really refuses by watching
//! that one mount fail with EBUSY.
//!
//! match-proto: int security_sb_mount(const char *dev_name, const struct path *path,
//!                                    const char *type, unsigned long flags, void *data)
//! (dev_name is already a kernel copy when the hook runs.)

use aya_ebpf::programs::LsmContext;
use aya_log_ebpf::info;
use volguard_common::{
    counters::Counter,
    lsm_probe::{DENY_ERRNO, PROBE_SOURCE_LEN},
    mount_flags::MS_BIND,
};

use crate::{
    helpers::{count, read_kernel_str},
    maps::LSM_PROBE_SOURCE,
};

/// Index of the previous LSM program's verdict after the hook's five arguments.
const PREVIOUS_VERDICT: usize = 5;

security_hook!("sb_mount", sb_mount_probe, sb_mount_probe_fmod_ret, probe);

#[inline(always)]
fn probe(ctx: LsmContext) -> i32 {
    count(Counter::LsmSbMountRuns);
    let previous: i32 = ctx.arg(PREVIOUS_VERDICT);
    if previous != 0 {
        return previous;
    }
    let flags: u64 = ctx.arg(3);
    if flags & MS_BIND == 0 || !source_is_probe(ctx.arg(0)) {
        return 0;
    }
    count(Counter::LsmProbeDenied);
    info!(&ctx, "volguard lsm probe: refused bind mount of the probe source");
    -DENY_ERRNO
}

/// Both buffers are NUL padded (ours starts zeroed; userspace pads the probe path), and
/// userspace keeps the probe path shorter than a truncated read, so comparing the whole
/// fixed-size buffers is an exact string comparison with a bound the verifier can see.
fn source_is_probe(dev_name: *const u8) -> bool {
    let Some(probe) = LSM_PROBE_SOURCE.get(0) else {
        return false;
    };
    if probe.len == 0 {
        return false;
    }
    let mut buf = [0u8; PROBE_SOURCE_LEN];
    if read_kernel_str(dev_name, &mut buf).is_none() {
        return false;
    }
    for i in 0..PROBE_SOURCE_LEN {
        if buf[i] != probe.path[i] {
            return false;
        }
    }
    true
}

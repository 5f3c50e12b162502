//! `cargo xtask demo`: the README's first command. Sets up and builds if needed, then runs
//! the agent on this bare host (no cluster) and shows it tracing real mounts.

use std::{process::Command, thread, time::Duration};

use anyhow::Context;

use crate::{
    proc::{cargo, require_root, run_cmd, target_dir},
    setup,
};

/// Mounts made in a private mount namespace so the host's table is untouched.
const SAMPLE_MOUNTS: &str = r#"set -e
d=$(mktemp -d /tmp/volguard-demo.XXXXXX)
mkdir -p "$d/volume" "$d/pod-a" "$d/pod-b"
unshare --mount --propagation private sh -c "
  mount -t tmpfs -o size=1m volguard-demo '$d/volume'
  mount --bind '$d/volume' '$d/pod-a'
  mount -o bind,remount,ro '$d/pod-a'
  mount --bind '$d/no-such-dir' '$d/pod-b' 2>/dev/null || true
"
rm -rf "$d""#;

pub fn run() -> anyhow::Result<()> {
    require_root("demo")?;
    println!("== 1. set up (skips what is installed)");
    setup::run()?;
    println!("\n== 2. build volguard (the eBPF programs are embedded in the binary)");
    run_cmd(cargo().args(["build", "--release", "-p", "volguard"]))?;

    println!("\n== 3. trace every mount(2) on this host");
    println!("   In a moment the demo makes four mounts in a private mount namespace: a tmpfs,");
    println!("   a bind mount of it, a read-only remount, and a bind of a missing path (fails).");
    println!("   Everything else that mounts on this host shows up too. Ctrl-C to stop.\n");
    let agent = target_dir().join("release/volguard");
    let mut tracer =
        Command::new(&agent).arg("trace").spawn().with_context(|| format!("starting {}", agent.display()))?;
    thread::sleep(Duration::from_millis(1500));
    run_cmd(Command::new("sh").arg("-c").arg(SAMPLE_MOUNTS)).context("making the sample mounts")?;
    tracer.wait()?;
    Ok(())
}

//! `cargo xtask demo`: the README's first command. Sets up and builds if needed, then plays
//! `volguard demo` on this bare host (no cluster), or with `--vm` inside the VM kernel,
//! where BPF LSM refuses the second pod's mount in the kernel.

use std::{process::Command, time::Duration};

use anyhow::Context;

use crate::{
    proc::{cargo, require_root, run_cmd, run_logged, target_dir},
    setup, vm,
};

#[derive(clap::Args)]
pub struct Options {
    /// Play the story inside the VM (BPF LSM active): the refusal happens in the kernel.
    #[arg(long)]
    vm: bool,
    /// Keep the agent and its debug API running at the end, until Ctrl-C (not with --vm).
    #[arg(long, conflicts_with = "vm")]
    hold: bool,
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    require_root("demo")?;
    println!("== set up what the demo plays with (skips what is installed)");
    setup::for_demo(options.vm)?;
    if options.vm {
        println!("\n== build volguard and play the demo in the VM");
        return vm::demo(Duration::from_secs(900));
    }
    // The dev profile: the same agent and the same (always optimized) eBPF programs,
    // built sooner than a release build from nothing, and already there after `cargo
    // xtask test`. The demo's few mounts do not need optimized userspace code.
    println!("\n== build volguard (the eBPF programs are embedded in the binary)");
    run_logged(cargo().args(["build", "--locked", "-p", "volguard"]), "demo: building volguard", "demo/build")?;
    let agent = target_dir().join("debug/volguard");
    let mut demo = Command::new(&agent);
    demo.arg("demo");
    if options.hold {
        demo.arg("--hold");
    }
    run_cmd(&mut demo).with_context(|| format!("running {} demo", agent.display()))
}

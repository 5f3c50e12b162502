//! volguard's developer commands, run as `cargo xtask <command>`.

mod alert_rules;
mod bench;
#[cfg(test)]
mod claims;
mod dashboards;
mod demo;
mod deploy;
mod disk;
mod e2e;
mod fuzz;
mod go;
mod layers;
mod nodejs;
mod proc;
mod promql;
mod setup;
mod sizes;
mod test;
mod timings;
mod type_names;
mod vm;
mod vm_kernels;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "volguard developer commands")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Install every system dependency (as root; skips what is present).
    Setup,
    /// Set up if needed, then run every kind of test (as root); `--full` adds fuzzing and
    /// the rest of the VM boots.
    Test(test::Options),
    /// Copy the last `cargo xtask test`'s step table (target/test-steps.md) into
    /// docs/testing.md.
    Timings,
    /// Boot the VM kernel under qemu and run the BPF LSM tests inside.
    VmTest(vm::Options),
    /// Set up and build if needed, then trace every mount on this host.
    Demo(demo::Options),
    /// Build the agent in release, run the benchmarks of issue 8, write BENCHMARKS.md (as root).
    Bench {
        /// Run only the benchmarks whose heading starts with this (e.g. `6` or `3c`);
        /// prints their table and leaves BENCHMARKS.md alone.
        #[arg(long)]
        only: Option<String>,
        /// Also measure the mount cycles and the tax on unrelated syscalls in pairs against
        /// the agent of this commit (built in release under target/bench-base): rows 1r
        /// (≤ 1.05×) and 8r (≤ 1.01×).
        #[arg(long, value_name = "REV")]
        base: Option<String>,
    },
    /// (internal) Hold a private mount namespace with N bind mounts until stdin closes.
    #[command(hide = true)]
    BenchHolder {
        #[arg(long)]
        mounts: usize,
        #[arg(long)]
        dir: std::path::PathBuf,
    },
    /// Run each fuzz target in fuzz/ for a bounded time (cargo-fuzz, which `cargo xtask
    /// setup` installs; on nightly where rustup has it, else on stable)
    Fuzz(fuzz::Options),
    /// A real single-node cluster (upstream Kubernetes, containerd, a CSI driver) in
    /// namespaces of its own, volguard installed from its chart and image, the scenarios.
    E2e(e2e::Options),
    /// Build the agent's image from deploy/Containerfile with buildah (offline) and save
    /// it as an archive under target/image/.
    Image(e2e::ImageOptions),
    /// (internal) The node's side of `e2e`, run inside its namespaces.
    #[command(hide = true)]
    E2eNode(e2e::NodeOptions),
    /// Check the agent's layers (imports point down the table in agent/src/lib.rs, no
    /// import cycles, only agent/src/kernel/ uses aya) and the size rules (files ≤ 600
    /// lines, agent functions ≤ 80 unless a `// Long by design:` comment says why).
    Layers,
    /// Check dashboards/: Grafana schema types (tsc), PromQL (promtool), metric names.
    CheckDashboards,
    /// Check deploy/: helm lint and template, schemas (kubernetes-validate), yamllint,
    /// manifests in sync, RBAC against the agent's code, dashboards copies, values docs.
    CheckDeploy {
        /// Rewrite deploy/manifests/volguard.yaml and the chart's dashboard copies first.
        #[arg(long)]
        write: bool,
    },
}

/// Errors end the command with their chain of causes on one line, without anyhow's
/// backtrace of xtask's own frames (.ci/run sets RUST_BACKTRACE for the tests' panics; the
/// backtrace of "some tests failed" then filled the end of CI's output, where the summary
/// should be).
fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    proc::put_cargo_bin_on_path();
    match Cli::parse().command {
        Command::Setup => setup::run(),
        Command::Test(options) => test::run(&options),
        Command::Timings => timings::run(),
        Command::VmTest(options) => vm::run(&options),
        Command::Demo(options) => demo::run(&options),
        Command::Bench { only, base } => bench::run(only.as_deref(), base.as_deref()),
        Command::BenchHolder { mounts, dir } => bench::holder(mounts, &dir),
        Command::Fuzz(options) => fuzz::run(&options),
        Command::E2e(options) => e2e::run(&options),
        Command::Image(options) => e2e::image(&options),
        Command::E2eNode(options) => e2e::node_main(&options),
        Command::Layers => layers::run(&proc::workspace_root()),
        Command::CheckDashboards => dashboards::run(),
        Command::CheckDeploy { write } => deploy::run(write),
    }
}

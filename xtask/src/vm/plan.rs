//! What `cargo xtask vm-test` runs where: the boots (kernel, `lsm=`, the test runs with
//! their filters and tracing backends), the demo's and the bench's boots, and the kernel
//! images `cargo xtask setup` fetched.

use std::path::PathBuf;

use anyhow::Context;

use crate::setup;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BootName {
    /// `bpf` in `lsm=`: enforcement works.
    LsmBpf,
    /// `bpf` left out of `lsm=`: LSM programs attach but never run.
    LsmNoBpf,
    /// `bpf` in `lsm=` on the 6.12 kernel of bookworm-backports: the enforcement and tracing
    /// tests, and the upgrade across backends (a subset, to keep the time), each tracing
    /// test once per backend. Booted without CMPXCHG16B (see [`VmKernel::qemu_cpu`]).
    LsmBpf612,
}

/// Which of `cargo xtask setup`'s kernels a boot uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmKernel {
    /// Debian 12's own cloud kernel (6.1).
    Stable,
    /// The 6.12 cloud kernel of bookworm-backports.
    Backports,
}

impl VmKernel {
    /// The kernel's version, as rows and logs name it.
    pub fn version(self) -> &'static str {
        match self {
            Self::Stable => "6.1",
            Self::Backports => "6.12",
        }
    }

    /// The kernel image `cargo xtask setup` fetched, or an error saying to run it.
    pub(super) fn image(self) -> anyhow::Result<PathBuf> {
        match self {
            Self::Stable => vm_kernel(),
            Self::Backports => setup::backports_kernel().with_context(|| {
                format!("no {} VM kernel in {}: run `cargo xtask setup` as root", self.version(), setup::VM_KERNEL_DIR)
            }),
        }
    }

    /// qemu's `-cpu` for this kernel: every feature TCG emulates, except that 6.12 gets no
    /// CMPXCHG16B. qemu 7.2's emulation of it leaves EFLAGS corrupt (reserved bits set) on
    /// SLUB's per-CPU fast path (`cmpxchg16b %gs:(%rsi)` in `kmem_cache_alloc_noprof`), which
    /// 6.12 takes on every allocation: two boots of two double-faulted there, after 38 and
    /// 170 s, with and without 5-level paging. Without CX16 the kernel takes SLUB's locked
    /// path and passed its whole subset, four boots of four (2026-11-27, one in a CI run).
    /// 6.1 has always passed with it.
    pub(super) fn qemu_cpu(self) -> &'static str {
        match self {
            Self::Stable => "max",
            Self::Backports => "max,-cx16",
        }
    }
}

/// Which tracing backend a run forces on its tracers and agents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tracing {
    /// The agent's own choice (trampolines on the VM kernels).
    Auto,
    /// The run twice: with `tracepoints`, then with `trampolines`.
    Both,
    /// Once, with `trampolines` and the kernel counting each program's runs and time
    /// (the agent's `--bpf-stats`): where the bench's mount cycles spend their time.
    TrampolinesWithBpfStats,
}

/// The runs `tracing` makes, as (environment, label suffix) pairs.
pub(super) fn tracing_runs(tracing: Tracing) -> &'static [(&'static str, &'static str)] {
    match tracing {
        Tracing::Auto => &[("", "")],
        Tracing::Both => &[
            ("VOLGUARD_TRACE_BACKEND=tracepoints ", " (tracepoints)"),
            ("VOLGUARD_TRACE_BACKEND=trampolines ", " (trampolines)"),
        ],
        Tracing::TrampolinesWithBpfStats => {
            &[("VOLGUARD_TRACE_BACKEND=trampolines VOLGUARD_BPF_STATS=true ", " (trampolines, --bpf-stats)")]
        }
    }
}

/// One VM boot: its `lsm=` list and the runs of the integration binary it makes, as
/// `(area, tracing, libtest arguments)`: the area (a module of `agent/tests/integration/`)
/// names the run on the console; the arguments select its tests by path (`host_trace::` is
/// every test of that module that is not ignored; `--ignored` runs only the ignored ones).
pub(super) struct Boot {
    pub(super) name: BootName,
    /// Which share of the variant's runs this boot makes, where a variant's runs are split
    /// over boots that run side by side (each boot is one emulated CPU, one host core).
    pub(super) part: Option<&'static str>,
    pub(super) lsm: &'static str,
    pub(super) runs: &'static [(&'static str, Tracing, &'static [&'static str])],
    /// `volguard` subcommands run after the tests (the demo).
    pub(super) agent_runs: &'static [&'static str],
    /// Virtual CPUs (qemu's multi-threaded TCG gives each a host thread).
    pub(super) cpus: u32,
    pub(super) kernel: VmKernel,
    /// Booted by a plain `vm-test` (else only when named with `--boot`).
    pub(super) default: bool,
}

impl Boot {
    /// The variant's name, and the part of its runs this boot makes where they are split.
    pub(super) fn label(&self) -> String {
        match self.part {
            Some(part) => format!("{:?}/{part}", self.name),
            None => format!("{:?}", self.name),
        }
    }
}

/// The ignored upgrade test (it forces each agent's backend itself).
pub(super) const UPGRADE_TEST: &[&str] =
    &["--ignored", "--exact", "vm_enforce::upgrade_across_a_change_of_tracing_backend_keeps_owners_and_settles_claims"];

/// Tests of kernel features newer than the VM's kernels: left out of their runs there
/// (under the VM's `CI=true` they would fail, not skip).
pub(super) const UNIQUE_MOUNT_ID_TEST: &str =
    "host_node_model::a_publish_made_while_no_agent_ran_is_not_taken_for_the_owner_for_its_reused_lower_mount_id";
pub(super) const OPEN_TREE_ATTR_TEST: &str = "host_mount_api::open_tree_attr_is_traced_where_the_kernel_has_it";

pub(super) const BOOTS: &[Boot] = &[
    // Lanes (one per core) take the boots in this order. The LsmBpf variant's runs are
    // split over two boots; on a 2-core machine one lane runs its enforcement half (~5.5–6
    // min) then LsmNoBpf (~2), the other LsmBpf612 (~3.3) then the tracing half (~3.5–4):
    // 7–8.5 minutes in all.
    Boot {
        name: BootName::LsmBpf,
        part: Some("enforce"),
        lsm: "lockdown,capability,bpf",
        runs: &[
            ("vm_lsm", Tracing::Auto, &["--ignored", "--exact", "vm_lsm::lsm_active_refuses_only_the_probe_bind"]),
            // The ignored tests whose names start with `enforce`: all but the no-bpf one;
            // claims are settled by the exit tracepoint or by fexit.
            ("vm_enforce", Tracing::Both, &["--ignored", "vm_enforce::enforce"]),
            // An upgrade that switches backend (it forces each agent's backend itself).
            ("vm_enforce", Tracing::Auto, UPGRADE_TEST),
            // The node model with the kernel owner map (seed, release, adoption); not the
            // test of unique mount ids, which 6.1 does not give (Linux 6.8; the host runs it).
            ("host_node_model", Tracing::Auto, &["host_node_model::", "--skip", UNIQUE_MOUNT_ID_TEST]),
            // The demo's story with the refusal in the kernel.
            ("host_demo", Tracing::Auto, &["host_demo::"]),
            // Mounts outside kubelet's publish, detached at syscall exit in enforce mode.
            ("host_out_of_band", Tracing::Both, &["host_out_of_band::"]),
        ],
        agent_runs: &[],
        cpus: 1,
        kernel: VmKernel::Stable,
        default: true,
    },
    // Each trampoline attach is slow under TCG, so the second kernel runs what differs
    // between kernels (verifier, BTF, trampolines): enforcement settled by fexit, the
    // upgrade across backends (tracepoints included), the tracing programs per backend.
    Boot {
        name: BootName::LsmBpf612,
        part: None,
        lsm: "lockdown,capability,bpf",
        runs: &[
            ("vm_lsm", Tracing::Auto, &["--ignored", "--exact", "vm_lsm::lsm_active_refuses_only_the_probe_bind"]),
            ("vm_enforce", Tracing::Auto, &["--ignored", "vm_enforce::enforce"]),
            ("vm_enforce", Tracing::Auto, UPGRADE_TEST),
            ("host_trace", Tracing::Both, &["host_trace::"]),
            ("host_trace_backend", Tracing::Auto, &["host_trace_backend::"]),
        ],
        agent_runs: &[],
        cpus: 1,
        kernel: VmKernel::Backports,
        default: true,
    },
    Boot {
        name: BootName::LsmBpf,
        part: Some("tracing"),
        lsm: "lockdown,capability,bpf",
        runs: &[
            // The tracing programs on this kernel too (verifier and BTF differ from the host's).
            ("host_trace", Tracing::Both, &["host_trace::"]),
            // Not open_tree_attr, which 6.1 does not have (Linux 6.15; the host runs it).
            ("host_mount_api", Tracing::Both, &["host_mount_api::", "--skip", OPEN_TREE_ATTR_TEST]),
            // Hostile paths with the LSM hooks resolving every target.
            ("host_hostile", Tracing::Auto, &["host_hostile::"]),
        ],
        agent_runs: &[],
        cpus: 1,
        kernel: VmKernel::Stable,
        default: true,
    },
    Boot {
        name: BootName::LsmNoBpf,
        part: None,
        lsm: "lockdown,capability",
        runs: &[
            (
                "vm_lsm",
                Tracing::Auto,
                &["--ignored", "--exact", "vm_lsm::lsm_inactive_program_attaches_but_never_runs"],
            ),
            (
                "vm_enforce",
                Tracing::Auto,
                &["--ignored", "--exact", "vm_enforce::without_bpf_in_lsm_auto_mode_picks_quarantine_and_says_why"],
            ),
            // Quarantine acts on the traced events: both backends.
            ("host_quarantine", Tracing::Both, &["host_quarantine::"]),
            // Trampolines work without bpf in lsm= too: auto must pick them.
            ("host_trace_backend", Tracing::Auto, &["host_trace_backend::"]),
        ],
        agent_runs: &[],
        cpus: 1,
        kernel: VmKernel::Stable,
        default: true,
    },
];

/// The tracing backends a run forces, as docs/testing.md's table says them.
#[cfg(test)]
pub(super) fn tracing_label(tracing: Tracing) -> &'static str {
    match tracing {
        Tracing::Auto => "auto",
        Tracing::Both => "tracepoints, then trampolines",
        Tracing::TrampolinesWithBpfStats => "trampolines with --bpf-stats",
    }
}

/// The table of `vm-test`'s boots, generated from [`BOOTS`] (docs/testing.md carries it,
/// checked by a test): each boot's kernel, `lsm=` and runs, with their backends and filters.
#[cfg(test)]
pub(super) fn boots_markdown() -> String {
    let mut s = String::from(
        "| boot (`--boot`) | kernel | `lsm=` | runs: area (tracing backend): libtest filter |\n|---|---|---|---|\n",
    );
    for boot in BOOTS {
        let name = clap::ValueEnum::to_possible_value(&boot.name).map(|v| v.get_name().to_owned()).unwrap_or_default();
        let name = match boot.part {
            Some(part) => format!("`{name}`, {part} half"),
            None => format!("`{name}`"),
        };
        let runs: Vec<String> = boot
            .runs
            .iter()
            .map(|(area, tracing, args)| format!("`{area}` ({}): `{}`", tracing_label(*tracing), args.join(" ")))
            .collect();
        s.push_str(&format!("| {name} | {} | `{}` | {} |\n", boot.kernel.version(), boot.lsm, runs.join("<br>")));
    }
    s
}

/// `cargo xtask demo --vm`: the demo story on a kernel where BPF LSM enforces.
pub(super) const DEMO_BOOT: Boot = Boot {
    name: BootName::LsmBpf,
    part: None,
    lsm: "lockdown,capability,bpf",
    runs: &[],
    agent_runs: &["demo"],
    cpus: 1,
    kernel: VmKernel::Stable,
    default: true,
};

/// `cargo xtask bench`: mount and unrelated syscalls with the LSM hooks, once per tracing
/// backend, on `kernel`. Two CPUs, as on the host, so the agent's userspace does not take
/// its turns from the measured loop.
pub(super) fn bench_boot(kernel: VmKernel) -> Boot {
    Boot {
        name: BootName::LsmBpf,
        part: None,
        lsm: "lockdown,capability,bpf",
        runs: &[
            ("syscall_bench", Tracing::Both, &["--ignored", "syscall_bench::", "--nocapture"]),
            (
                "syscall_bench",
                Tracing::TrampolinesWithBpfStats,
                &["--ignored", "syscall_bench::mount_cycle_overhead", "--nocapture"],
            ),
        ],
        agent_runs: &[],
        cpus: 2,
        kernel,
        default: true,
    }
}

/// The kernel `cargo xtask setup` fetched, or an error saying to run it.
pub(super) fn vm_kernel() -> anyhow::Result<PathBuf> {
    setup::find_vm_kernel()
        .with_context(|| format!("no VM kernel in {}: run `cargo xtask setup` as root", setup::VM_KERNEL_DIR))
}

/// Each run of the test binary a boot makes, in order: (label, environment, libtest arguments).
pub(super) fn test_runs(boot: &Boot) -> Vec<(String, &'static str, &'static [&'static str])> {
    let mut runs = Vec::new();
    for (area, tracing, args) in boot.runs {
        for (env, suffix) in tracing_runs(*tracing) {
            runs.push((format!("{area}{suffix}"), *env, *args));
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::boots_markdown;

    /// `VOLGUARD_BLESS=1 cargo test -p xtask the_testing_doc` rewrites the table instead.
    #[test]
    fn the_testing_doc_carries_the_boots_as_the_code_runs_them() {
        let path = crate::proc::workspace_root().join("docs/testing.md");
        let doc = std::fs::read_to_string(&path).unwrap();
        let (before, rest) = doc.split_once("<!-- vm-boots:start").expect("docs/testing.md's vm-boots:start marker");
        let (marker_rest, rest) = rest.split_once("-->").expect("the marker's end");
        let (table, after) = rest.split_once("<!-- vm-boots:end").expect("docs/testing.md's vm-boots:end marker");
        if std::env::var_os("VOLGUARD_BLESS").is_some() {
            let fresh =
                format!("{before}<!-- vm-boots:start{marker_rest}-->\n{}<!-- vm-boots:end{after}", boots_markdown());
            std::fs::write(&path, fresh).unwrap();
            return;
        }
        assert_eq!(
            table.trim(),
            boots_markdown().trim(),
            "regenerate: VOLGUARD_BLESS=1 cargo test -p xtask the_testing_doc"
        );
    }
}

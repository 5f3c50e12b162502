//! What `cargo xtask vm-test` runs where: the boots (kernel, `lsm=`, the test runs with
//! their filters and tracing backends), the demo's and the bench's boots, and the kernel
//! images `cargo xtask setup` fetched.

use std::path::PathBuf;

use anyhow::Context;

use crate::vm_kernels::{VM_KERNEL_DIR, kernel_image};

/// What a boot's `lsm=` makes of the kernel, and so what it tests (`--boot`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BootName {
    /// `bpf` in `lsm=`: enforcement works.
    LsmBpf,
    /// `bpf` left out of `lsm=`: LSM programs attach but never run, and the agents refuse
    /// in the kernel with fmod_ret programs on the `security_*` functions instead.
    #[value(name = "fmod-ret")]
    FModRet,
    /// `bpf` left out of `lsm=` and the agents' fmod_ret turned off (`--security-hooks
    /// bpf-lsm`): nothing refuses in the kernel, as where trampolines are refused; quarantine.
    LsmNoBpf,
    /// A kernel below volguard's floor: the agent must refuse to start, saying why.
    BelowFloor,
}

impl BootName {
    /// The `--security-hooks` every agent of such a boot takes (from its environment).
    pub(super) fn agents_security_hooks(self) -> Option<&'static str> {
        match self {
            Self::LsmNoBpf => Some("bpf-lsm"),
            Self::LsmBpf | Self::FModRet | Self::BelowFloor => None,
        }
    }
}

/// Which of `cargo xtask setup`'s kernels a boot uses (`--linux`), by version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum VmKernel {
    /// bullseye's 5.10: below the floor.
    #[value(name = "5.10")]
    Linux510,
    /// bookworm's 6.1 (the demo's, the e2e VM node's and the bench's first).
    #[value(name = "6.1")]
    Linux61,
    /// bookworm-backports' 6.12.
    #[value(name = "6.12")]
    Linux612,
    /// trixie-backports' 7.3: fanotify mount notifications, BPF LSM and trampolines.
    #[value(name = "7.3")]
    Linux73,
}

impl VmKernel {
    /// The kernel's version, as rows, logs and [`KERNELS`](crate::vm_kernels::KERNELS) name it.
    pub fn version(self) -> &'static str {
        match self {
            Self::Linux510 => "5.10",
            Self::Linux61 => "6.1",
            Self::Linux612 => "6.12",
            Self::Linux73 => "7.3",
        }
    }

    /// The kernel image `cargo xtask setup` fetched, or an error saying to run it.
    pub(super) fn image(self) -> anyhow::Result<PathBuf> {
        kernel_image(self.version()).with_context(|| {
            format!("no {} VM kernel in {VM_KERNEL_DIR}: run `cargo xtask setup` as root", self.version())
        })
    }

    /// qemu's `-cpu` for this kernel: every feature TCG emulates, except that 6.12 and later
    /// get no CMPXCHG16B. qemu 7.2's emulation of it leaves EFLAGS corrupt (reserved bits
    /// set) on SLUB's per-CPU fast path (`cmpxchg16b %gs:(%rsi)` in `kmem_cache_alloc_noprof`),
    /// which 6.12 takes on every allocation: two boots of two double-faulted there, after 38
    /// and 170 s, with and without 5-level paging. Without CX16 the kernel takes SLUB's
    /// locked path and passed its whole subset, four boots of four (2026-11-27, one in a CI
    /// run). 6.1 (and 5.10) have always passed with it.
    pub fn qemu_cpu(self) -> &'static str {
        match self {
            Self::Linux510 | Self::Linux61 => "max",
            Self::Linux612 | Self::Linux73 => "max,-cx16",
        }
    }

    /// qemu's `-accel` for a boot of this kernel with `cpus` CPUs (the e2e's VM node's
    /// too: 6.1, two CPUs). 7.3 and 6.1 with two CPUs get one TCG thread for both. With a thread per CPU (qemu 7.2), 7.3's bench boot
    /// oopsed on `int3` at `trace_syscall_enter+0xa`, the static branch the syscall
    /// tracepoints flip each time an agent attaches or detaches them (our reading: one CPU
    /// still ran the breakpoint the kernel's code patching had already taken out), and
    /// 6.1's soft-locked with both CPUs stuck at once, one in the agent, one in the open
    /// loop, while agents attached and detached the tracepoints and the LSM hooks (a
    /// cross-CPU wait of code patching, we read). 6.12's test boots never did either; one
    /// of its bench boots oopsed as 7.3's did (`int3` at `syscall_trace_enter`, once so
    /// far); it keeps a thread per CPU, which its bench figures assume. With one thread
    /// every CPU sees a code change at once. The e2e's VM node soft-locked the same way
    /// (both CPUs, in two of the driver's sidecars) as its agent restarted at a `helm
    /// upgrade`, attaching its programs beside the pinned ones and detaching those.
    pub fn qemu_accel(self, cpus: u32) -> &'static str {
        match self {
            Self::Linux73 | Self::Linux61 if cpus > 1 => "tcg,thread=single",
            _ => "tcg",
        }
    }

    /// Whether the tracing programs park each call by thread id here rather than in the
    /// thread's storage: 7.3's BPF local storage allocates with `kmalloc_nolock`, which
    /// has nothing to give on a CPU without CMPXCHG16B ([`Self::qemu_cpu`]).
    pub(super) fn parks_calls_by_thread(self) -> bool {
        matches!(self, Self::Linux73)
    }
}

/// Which tracing backend a run forces on its tracers and agents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tracing {
    /// Each test's own: the agent's choice (trampolines on the VM kernels), except where a
    /// test needs a syscall backend and forces tracepoints (`syscall_backend()`).
    Auto,
    /// The run twice: with `tracepoints`, then with `trampolines`.
    Both,
    /// Once, with `trampolines` (what auto picks where the kernel has them).
    Trampolines,
    /// Once, with `trampolines` and the kernel counting each program's runs and time
    /// (the agent's `--bpf-stats`): where the bench's mount cycles spend their time.
    TrampolinesWithBpfStats,
    /// Once, with `trampolines` and the security hooks attached as fmod_ret although BPF
    /// LSM works: the bench's rows of fmod_ret beside BPF LSM's, in the same boot.
    TrampolinesWithFModRet,
}

/// The runs `tracing` makes, as (environment, label suffix) pairs.
pub(super) fn tracing_runs(tracing: Tracing) -> &'static [(&'static str, &'static str)] {
    match tracing {
        Tracing::Auto => &[("", "")],
        Tracing::Both => &[
            ("VOLGUARD_TRACE_BACKEND=tracepoints ", " (tracepoints)"),
            ("VOLGUARD_TRACE_BACKEND=trampolines ", " (trampolines)"),
        ],
        Tracing::Trampolines => &[("VOLGUARD_TRACE_BACKEND=trampolines ", " (trampolines)")],
        Tracing::TrampolinesWithBpfStats => {
            &[("VOLGUARD_TRACE_BACKEND=trampolines VOLGUARD_BPF_STATS=true ", " (trampolines, --bpf-stats)")]
        }
        Tracing::TrampolinesWithFModRet => {
            &[("VOLGUARD_TRACE_BACKEND=trampolines VOLGUARD_SECURITY_HOOKS=fmod-ret ", " (trampolines, fmod_ret)")]
        }
    }
}

/// One run of the integration binary: the area (a module of `agent/tests/integration/`)
/// names it on the console; the libtest arguments select its tests by path
/// (`host_trace::` is every test of that module that is not ignored; `--ignored` runs only
/// the ignored ones).
pub(super) type Run = (&'static str, Tracing, &'static [&'static str]);

/// One VM boot: its kernel, its `lsm=` list and its runs of the integration binary.
pub(super) struct Boot {
    pub(super) name: BootName,
    pub(super) kernel: VmKernel,
    /// Which share of the kernel's runs this boot makes, where they are split over boots
    /// that run side by side (each boot is one emulated CPU, one host core).
    pub(super) part: Option<&'static str>,
    pub(super) lsm: &'static str,
    pub(super) runs: &'static [Run],
    /// `volguard` subcommands run after the tests (the demo).
    pub(super) agent_runs: &'static [&'static str],
    /// Virtual CPUs (qemu's multi-threaded TCG gives each a host thread).
    pub(super) cpus: u32,
}

impl Boot {
    /// The boot's name, kernel, and the part of its runs where they are split.
    pub(super) fn label(&self) -> String {
        let name = format!("{:?}@{}", self.name, self.kernel.version());
        match self.part {
            Some(part) => format!("{name}/{part}"),
            None => name,
        }
    }
}

const LSM_BPF: &str = "lockdown,capability,bpf";
const LSM_NO_BPF: &str = "lockdown,capability";

/// The ignored upgrade test (it forces each agent's backend itself).
pub(super) const UPGRADE_TEST: &[&str] =
    &["--ignored", "--exact", "vm_enforce::upgrade_across_a_change_of_tracing_backend_keeps_owners_and_settles_claims"];

/// Tests of kernel features newer than 6.1 and 6.12: left out of their runs there (under
/// the VM's `CI=true` they would fail, not skip).
pub(super) const UNIQUE_MOUNT_ID_TEST: &str =
    "host_node_model::a_publish_made_while_no_agent_ran_is_not_taken_for_the_owner_for_its_reused_lower_mount_id";
pub(super) const OPEN_TREE_ATTR_TEST: &str = "host_mount_api::open_tree_attr_is_traced_where_the_kernel_has_it";

/// With `bpf` in `lsm=`: the probe refuses only its own bind, and auto picks the mode and
/// backend [`COMPATIBILITY`] says.
const LSM_ACTIVE: Run =
    ("vm_lsm", Tracing::Auto, &["--ignored", "--exact", "vm_lsm::lsm_active_refuses_only_the_probe_bind"]);
const AUTO_WITH_BPF: Run = (
    "vm_enforce",
    Tracing::Auto,
    &["--ignored", "--exact", "vm_enforce::with_bpf_in_lsm_auto_picks_the_mode_and_backend_the_matrix_says"],
);
/// The ignored tests whose names start with `enforce`: refusals on every route, claims
/// settled by the exit programs, restarts and adoption.
const ENFORCE: &[&str] = &["--ignored", "vm_enforce::enforce"];
const UPGRADE: Run = ("vm_enforce", Tracing::Auto, UPGRADE_TEST);
/// Another pod's opens of an owned volume's files, refused in the kernel on every route.
const OPEN_GUARD: Run = ("vm_open_guard", Tracing::Auto, &["--ignored", "vm_open_guard::"]);
/// Without `bpf` in `lsm=`: the LSM program attaches but never runs, auto picks the mode,
/// security hooks and backend [`COMPATIBILITY`] says (fmod_ret, or quarantine where the boot
/// turns fmod_ret off), and quarantine acts on traced events.
const LSM_INACTIVE: Run =
    ("vm_lsm", Tracing::Auto, &["--ignored", "--exact", "vm_lsm::lsm_inactive_program_attaches_but_never_runs"]);
const AUTO_WITHOUT_BPF: Run = (
    "vm_enforce",
    Tracing::Auto,
    &["--ignored", "--exact", "vm_enforce::without_bpf_in_lsm_auto_picks_the_mode_and_backend_the_matrix_says"],
);
const QUARANTINE_WITHOUT_BPF: Run = (
    "vm_enforce",
    Tracing::Auto,
    &["--ignored", "--exact", "vm_enforce::without_bpf_in_lsm_auto_mode_picks_quarantine_and_says_why"],
);
const QUARANTINE: Run = ("host_quarantine", Tracing::Both, &["host_quarantine::"]);
/// Without `bpf` in `lsm=`, the fmod_ret twin of the probe refuses its bind.
const FMOD_RET_ACTIVE: Run = (
    "vm_lsm",
    Tracing::Auto,
    &["--ignored", "--exact", "vm_lsm::fmod_ret_refuses_only_the_probe_bind_without_bpf_lsm"],
);
/// The same with trampolines, on 7.3, for the reason [`OUT_OF_BAND_TRAMPOLINES`] gives:
/// forced tracepoints there lost a publish's exit to a recursion miss in one CI run (the
/// claim then came from the reconciliation, 30 s later, not from the event the test waits
/// for). 6.1 and 6.12 (`--full`) and the host keep the quarantine on tracepoints.
const QUARANTINE_TRAMPOLINES: Run = ("host_quarantine", Tracing::Trampolines, &["host_quarantine::"]);
const TRACE: Run = ("host_trace", Tracing::Both, &["host_trace::"]);
const TRACE_BACKEND: Run = ("host_trace_backend", Tracing::Auto, &["host_trace_backend::"]);
/// Mounts outside kubelet's publish: detached at syscall exit, another pod's clone refused
/// in the kernel (on every kernel with BPF LSM: the compatibility table claims it there).
const OUT_OF_BAND: Run = ("host_out_of_band", Tracing::Auto, &["host_out_of_band::"]);
/// The same with trampolines, on 7.3: there a syscall tracepoint's program is skipped
/// (counted as a recursion miss) whenever it fires while a BPF map syscall is preempted
/// on the same CPU, as the agent's own reads are on the VM's single CPU; the publish's
/// exit, and with it the detach the tests wait for, is then left to the reconciliation.
/// Auto picks trampolines there; docs/tracing.md says what forced tracepoints risk.
const OUT_OF_BAND_TRAMPOLINES: Run = ("host_out_of_band", Tracing::Trampolines, &["host_out_of_band::"]);
/// A second mount of a block volume's device (ext4 on a loop device), by another pod:
/// detached at its exit in enforce mode, on every kernel with BPF LSM (docs/enforcement.md's
/// `device` row), with the backend auto picks there (forced tracepoints risk 7.3's
/// recursion misses, above). Not the fanotify case, which the host runs.
const DEVICE_MOUNTS: Run = (
    "host_device_mounts",
    Tracing::Trampolines,
    &["--exact", "host_device_mounts::a_second_mount_of_a_block_volumes_device_by_another_pod_is_detached"],
);

/// What `cargo xtask vm-test` boots. Lanes (one per core) take the boots in this order,
/// the longest first. 6.1 runs every area, split over two boots; 6.12 and 7.3 what differs
/// between kernels (verifier, BTF, trampolines, fanotify): enforcement, the upgrade across
/// backends, the tracing programs per backend and the quarantine fallback.
pub(super) const BOOTS: &[Boot] = &[
    Boot {
        name: BootName::LsmBpf,
        kernel: VmKernel::Linux61,
        part: Some("enforce"),
        lsm: LSM_BPF,
        runs: &[
            LSM_ACTIVE,
            AUTO_WITH_BPF,
            // Claims are settled by the exit tracepoint or by fexit.
            ("vm_enforce", Tracing::Both, ENFORCE),
            UPGRADE,
            OPEN_GUARD,
            // The node model with the kernel owner map (seed, release, adoption); not the
            // test of unique mount ids (Linux 6.8; 7.3 runs it).
            ("host_node_model", Tracing::Auto, &["host_node_model::", "--skip", UNIQUE_MOUNT_ID_TEST]),
            // The demo's story with the refusal in the kernel.
            ("host_demo", Tracing::Auto, &["host_demo::"]),
            // Mounts outside kubelet's publish, detached at syscall exit in enforce mode.
            ("host_out_of_band", Tracing::Both, &["host_out_of_band::"]),
            DEVICE_MOUNTS,
        ],
        agent_runs: &[],
        cpus: 1,
    },
    Boot {
        name: BootName::LsmBpf,
        kernel: VmKernel::Linux73,
        part: None,
        lsm: LSM_BPF,
        runs: &[
            LSM_ACTIVE,
            AUTO_WITH_BPF,
            ("vm_enforce", Tracing::Auto, ENFORCE),
            UPGRADE,
            OPEN_GUARD,
            ("host_node_model", Tracing::Auto, &["--exact", UNIQUE_MOUNT_ID_TEST]),
            // The tracing programs with their calls parked by thread id (see
            // `VmKernel::parks_calls_by_thread`).
            TRACE,
            TRACE_BACKEND,
            OUT_OF_BAND_TRAMPOLINES,
            DEVICE_MOUNTS,
        ],
        agent_runs: &[],
        cpus: 1,
    },
    Boot {
        name: BootName::LsmBpf,
        kernel: VmKernel::Linux612,
        part: None,
        lsm: LSM_BPF,
        runs: &[
            LSM_ACTIVE,
            AUTO_WITH_BPF,
            ("vm_enforce", Tracing::Auto, ENFORCE),
            UPGRADE,
            OPEN_GUARD,
            TRACE,
            TRACE_BACKEND,
            OUT_OF_BAND,
            DEVICE_MOUNTS,
        ],
        agent_runs: &[],
        cpus: 1,
    },
    Boot {
        name: BootName::LsmBpf,
        kernel: VmKernel::Linux61,
        part: Some("tracing"),
        lsm: LSM_BPF,
        runs: &[
            // The tracing programs on this kernel too (verifier and BTF differ from the host's).
            TRACE,
            // Not open_tree_attr, which 6.1 does not have (Linux 6.15; the host runs it).
            ("host_mount_api", Tracing::Both, &["host_mount_api::", "--skip", OPEN_TREE_ATTR_TEST]),
            // Hostile paths with the LSM hooks resolving every target.
            ("host_hostile", Tracing::Auto, &["host_hostile::"]),
        ],
        agent_runs: &[],
        cpus: 1,
    },
    // The same refusals without `bpf` in `lsm=`: the programs attach as fmod_ret.
    Boot {
        name: BootName::FModRet,
        kernel: VmKernel::Linux61,
        part: None,
        lsm: LSM_NO_BPF,
        runs: &[
            FMOD_RET_ACTIVE,
            AUTO_WITHOUT_BPF,
            ("vm_enforce", Tracing::Auto, ENFORCE),
            UPGRADE,
            OPEN_GUARD,
            ("host_out_of_band", Tracing::Auto, &["host_out_of_band::"]),
            DEVICE_MOUNTS,
        ],
        agent_runs: &[],
        cpus: 1,
    },
    Boot {
        name: BootName::FModRet,
        kernel: VmKernel::Linux73,
        part: None,
        lsm: LSM_NO_BPF,
        runs: &[
            FMOD_RET_ACTIVE,
            AUTO_WITHOUT_BPF,
            ("vm_enforce", Tracing::Auto, ENFORCE),
            OPEN_GUARD,
            OUT_OF_BAND_TRAMPOLINES,
        ],
        agent_runs: &[],
        cpus: 1,
    },
    Boot {
        name: BootName::FModRet,
        kernel: VmKernel::Linux612,
        part: None,
        lsm: LSM_NO_BPF,
        runs: &[FMOD_RET_ACTIVE, AUTO_WITHOUT_BPF, ("vm_enforce", Tracing::Auto, ENFORCE), OPEN_GUARD, OUT_OF_BAND],
        agent_runs: &[],
        cpus: 1,
    },
    Boot {
        name: BootName::LsmNoBpf,
        kernel: VmKernel::Linux61,
        part: None,
        lsm: LSM_NO_BPF,
        runs: &[LSM_INACTIVE, AUTO_WITHOUT_BPF, QUARANTINE_WITHOUT_BPF, QUARANTINE, TRACE_BACKEND],
        agent_runs: &[],
        cpus: 1,
    },
    Boot {
        name: BootName::LsmNoBpf,
        kernel: VmKernel::Linux73,
        part: None,
        lsm: LSM_NO_BPF,
        runs: &[
            LSM_INACTIVE,
            AUTO_WITHOUT_BPF,
            QUARANTINE_WITHOUT_BPF,
            QUARANTINE_TRAMPOLINES,
            // The third backend, mount notifications (Linux 6.15+), and a quarantining
            // agent on them: where a host refuses trampolines, auto takes it.
            ("host_fanotify", Tracing::Auto, &["host_fanotify::"]),
        ],
        agent_runs: &[],
        cpus: 1,
    },
    Boot {
        name: BootName::LsmNoBpf,
        kernel: VmKernel::Linux612,
        part: None,
        lsm: LSM_NO_BPF,
        runs: &[LSM_INACTIVE, AUTO_WITHOUT_BPF, QUARANTINE_WITHOUT_BPF, QUARANTINE],
        agent_runs: &[],
        cpus: 1,
    },
    Boot {
        name: BootName::BelowFloor,
        kernel: VmKernel::Linux510,
        part: None,
        lsm: LSM_BPF,
        runs: &[(
            "vm_floor",
            Tracing::Auto,
            &["--ignored", "--exact", "vm_floor::below_the_floor_the_agent_refuses_to_start_and_says_why"],
        )],
        agent_runs: &[],
        cpus: 1,
    },
];

/// Whether `cargo xtask test` boots it without `--full`: every kernel of the matrix, each
/// way of refusing on two of them (BPF LSM on the oldest and the newest, fmod_ret on 6.1,
/// whose `security_inode_setattr` has no idmap parameter, and on 6.12, which has it), the
/// quarantine fallback and fanotify on the newest, the floor. Left to `--full`: BPF LSM on
/// 6.12 and fmod_ret on 7.3 (the same programs on a layout another boot has), 6.1's tracing
/// half (its programs are the host tests' and 6.12's and 7.3's), and the fallback without
/// `bpf` on 6.1 and 6.12 (7.3's boot makes it there).
pub(super) fn in_default_run(boot: &Boot) -> bool {
    !matches!(
        (boot.name, boot.kernel, boot.part),
        (BootName::LsmBpf, VmKernel::Linux61, Some("tracing"))
            | (BootName::LsmBpf, VmKernel::Linux612, _)
            | (BootName::FModRet, VmKernel::Linux73, _)
            | (BootName::LsmNoBpf, VmKernel::Linux61 | VmKernel::Linux612, _)
    )
}

/// The tracing backends a run forces, as docs/testing.md's table says them.
#[cfg(test)]
pub(super) fn tracing_label(tracing: Tracing) -> &'static str {
    match tracing {
        Tracing::Auto => "each test's own",
        Tracing::Both => "tracepoints, then trampolines",
        Tracing::Trampolines => "trampolines",
        Tracing::TrampolinesWithBpfStats => "trampolines with --bpf-stats",
        Tracing::TrampolinesWithFModRet => "trampolines, security hooks as fmod_ret",
    }
}

/// The table of `vm-test`'s boots, generated from [`BOOTS`] (docs/testing.md carries it,
/// checked by a test): each boot's kernel, `lsm=` and runs, with their backends and filters.
#[cfg(test)]
pub(super) fn boots_markdown() -> String {
    let mut s = String::from(
        "| boot (`--boot`) | kernel (`--linux`) | `lsm=` | runs: area (tracing backend): libtest filter |\n|---|---|---|---|\n",
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
    kernel: VmKernel::Linux61,
    part: None,
    lsm: LSM_BPF,
    runs: &[],
    agent_runs: &["demo"],
    cpus: 1,
};

/// `cargo xtask bench`: mount and unrelated syscalls with the LSM hooks, once per tracing
/// backend, on `kernel`. Two CPUs, as on the host, so the agent's userspace does not take
/// its turns from the measured loop.
pub(super) fn bench_boot(kernel: VmKernel) -> Boot {
    Boot {
        name: BootName::LsmBpf,
        kernel,
        part: None,
        lsm: LSM_BPF,
        runs: &[
            // Not the refusal of opens through fanotify (9d) nor the reporter under load (9e),
            // which BPF LSM makes moot.
            (
                "syscall_bench",
                Tracing::Both,
                &[
                    "--ignored",
                    "syscall_bench::",
                    "--skip",
                    "syscall_bench::open_refusal_cost",
                    "--skip",
                    "syscall_bench::agent_cpu_while_the_owner_opens_files",
                    "--nocapture",
                ],
            ),
            (
                "syscall_bench",
                Tracing::TrampolinesWithBpfStats,
                &["--ignored", "syscall_bench::mount_cycle_overhead", "--nocapture"],
            ),
            // The mount cycle and the open guard once more with the security hooks as
            // fmod_ret (BPF LSM's rows are the first run's trampolines half).
            (
                "syscall_bench",
                Tracing::TrampolinesWithFModRet,
                &["--ignored", "syscall_bench::mount_cycle_overhead", "syscall_bench::open_guard_cost", "--nocapture"],
            ),
            // 9f: no agent, so no backend of its own.
            ("hook_floor_bench", Tracing::Auto, &["--ignored", "hook_floor_bench::", "--nocapture"]),
        ],
        agent_runs: &[],
        cpus: 2,
    }
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

/// Checks that the generated table between `<!-- {marker}:start` and `<!-- {marker}:end`
/// in the doc at `path` equals `table`; with `VOLGUARD_BLESS` set, rewrites it instead
/// (`VOLGUARD_BLESS=1 cargo test -p xtask <test>`).
#[cfg(test)]
pub(super) fn check_generated(path: &str, marker: &str, table: &str, test: &str) {
    let path = crate::proc::workspace_root().join(path);
    let doc = std::fs::read_to_string(&path).unwrap();
    let start = format!("<!-- {marker}:start");
    let end = format!("<!-- {marker}:end");
    let (before, rest) = doc.split_once(&start).unwrap_or_else(|| panic!("{} has no {start} marker", path.display()));
    let (marker_rest, rest) = rest.split_once("-->").expect("the marker's end");
    let (found, after) = rest.split_once(&end).unwrap_or_else(|| panic!("{} has no {end} marker", path.display()));
    if std::env::var_os("VOLGUARD_BLESS").is_some() {
        std::fs::write(&path, format!("{before}{start}{marker_rest}-->\n{table}{end}{after}")).unwrap();
        return;
    }
    assert_eq!(found.trim(), table.trim(), "regenerate: VOLGUARD_BLESS=1 cargo test -p xtask {test}");
}

#[cfg(test)]
mod tests {
    use super::{boots_markdown, check_generated};

    #[test]
    fn the_testing_doc_carries_the_boots_as_the_code_runs_them() {
        check_generated("docs/testing.md", "vm-boots", &boots_markdown(), "the_testing_doc");
    }
}

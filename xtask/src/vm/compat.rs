//! The compatibility table: for each kernel of the matrix and `lsm=` setting, what auto
//! picks and what that means. The VM boots assert it (their init exports the row's mode and
//! backend, which the tests that start an agent in auto compare with its ready line), and
//! docs/compatibility.md carries it, generated from here.

use super::plan::{BootName, VmKernel};

/// One row: what volguard does on `kernel` booted with `lsm`.
pub(super) struct Outcome {
    pub(super) kernel: VmKernel,
    pub(super) lsm: BootName,
    /// The mode auto picks (`enforce`, `quarantine`), or `refuses to start`.
    pub(super) mode: &'static str,
    /// How auto's in-kernel mode refuses (`bpf_lsm`, `fmod_ret`), or `none`.
    pub(super) hooks: &'static str,
    /// The tracing backend auto picks.
    pub(super) backend: &'static str,
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the docs' table, a test"))]
    pub(super) seen: &'static str,
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the docs' table, a test"))]
    pub(super) refused: &'static str,
}

const SYSCALLS_SEEN: &str = "every mount-family syscall, with its caller, duration and result, \
                             and mounts outside kubelet's publish";
const IN_KERNEL: &str = "a second pod's publish, and another pod's clone of a volume's tree (`open_tree` + \
                         `move_mount`), in the kernel (`EBUSY`) before anything is mounted; another pod's \
                         other mounts outside kubelet's publish are detached at their syscall exit";
const IN_KERNEL_FMOD_RET: &str = "the same as with `bpf`, by fmod_ret programs on the kernel's `security_*` \
                                  functions";
const AFTER_THE_FACT: &str = "nothing in the kernel: a second pod's publish is detached and masked \
                              once it is made; mounts outside kubelet's publish are detached too";

pub(super) const COMPATIBILITY: &[Outcome] = &[
    Outcome {
        kernel: VmKernel::Linux510,
        lsm: BootName::BelowFloor,
        mode: "refuses to start",
        hooks: "none",
        backend: "none",
        seen: "nothing",
        refused: "the agent itself, with one line naming what the kernel lacks and Linux 5.13",
    },
    Outcome {
        kernel: VmKernel::Linux61,
        lsm: BootName::LsmBpf,
        mode: "enforce",
        hooks: "bpf_lsm",
        backend: "trampolines",
        seen: SYSCALLS_SEEN,
        refused: IN_KERNEL,
    },
    Outcome {
        kernel: VmKernel::Linux61,
        lsm: BootName::FModRet,
        mode: "enforce",
        hooks: "fmod_ret",
        backend: "trampolines",
        seen: SYSCALLS_SEEN,
        refused: IN_KERNEL_FMOD_RET,
    },
    Outcome {
        kernel: VmKernel::Linux61,
        lsm: BootName::LsmNoBpf,
        mode: "quarantine",
        hooks: "none",
        backend: "trampolines",
        seen: SYSCALLS_SEEN,
        refused: AFTER_THE_FACT,
    },
    Outcome {
        kernel: VmKernel::Linux612,
        lsm: BootName::LsmBpf,
        mode: "enforce",
        hooks: "bpf_lsm",
        backend: "trampolines",
        seen: SYSCALLS_SEEN,
        refused: IN_KERNEL,
    },
    Outcome {
        kernel: VmKernel::Linux612,
        lsm: BootName::FModRet,
        mode: "enforce",
        hooks: "fmod_ret",
        backend: "trampolines",
        seen: SYSCALLS_SEEN,
        refused: IN_KERNEL_FMOD_RET,
    },
    Outcome {
        kernel: VmKernel::Linux612,
        lsm: BootName::LsmNoBpf,
        mode: "quarantine",
        hooks: "none",
        backend: "trampolines",
        seen: SYSCALLS_SEEN,
        refused: AFTER_THE_FACT,
    },
    Outcome {
        kernel: VmKernel::Linux73,
        lsm: BootName::LsmBpf,
        mode: "enforce",
        hooks: "bpf_lsm",
        backend: "trampolines",
        seen: SYSCALLS_SEEN,
        refused: IN_KERNEL,
    },
    Outcome {
        kernel: VmKernel::Linux73,
        lsm: BootName::FModRet,
        mode: "enforce",
        hooks: "fmod_ret",
        backend: "trampolines",
        seen: SYSCALLS_SEEN,
        refused: IN_KERNEL_FMOD_RET,
    },
    Outcome {
        kernel: VmKernel::Linux73,
        lsm: BootName::LsmNoBpf,
        mode: "quarantine",
        hooks: "none",
        backend: "trampolines",
        seen: SYSCALLS_SEEN,
        refused: AFTER_THE_FACT,
    },
];

/// The row of `kernel` booted as `lsm`, if the table has one.
pub(super) fn outcome(kernel: VmKernel, lsm: BootName) -> Option<&'static Outcome> {
    COMPATIBILITY.iter().find(|o| o.kernel == kernel && o.lsm == lsm)
}

/// The environment a boot's tests read their expected outcome from.
pub(super) const EXPECT_MODE_ENV: &str = "VOLGUARD_EXPECT_MODE";
pub(super) const EXPECT_BACKEND_ENV: &str = "VOLGUARD_EXPECT_BACKEND";
pub(super) const EXPECT_HOOKS_ENV: &str = "VOLGUARD_EXPECT_HOOKS";
/// The agents' `--security-hooks`, where a boot sets it for every agent.
const SECURITY_HOOKS_ENV: &str = "VOLGUARD_SECURITY_HOOKS";

/// Set to `yes` where the tracing programs must park calls by thread id.
pub(super) const EXPECT_PARKED_BY_THREAD_ENV: &str = "VOLGUARD_EXPECT_PARKED_BY_THREAD";

/// The `export` lines of a boot's init: its row's mode, security hooks and backend (none
/// without a row), where the tracing programs park calls, and the agents' security hooks
/// where the boot turns fmod_ret off.
pub(super) fn expectation_exports(kernel: VmKernel, lsm: BootName) -> String {
    let by_thread = if kernel.parks_calls_by_thread() { "yes" } else { "no" };
    let mut exports = format!("export {EXPECT_PARKED_BY_THREAD_ENV}={by_thread}\n");
    if let Some(o) = outcome(kernel, lsm) {
        exports.push_str(&format!(
            "export {EXPECT_MODE_ENV}='{}' {EXPECT_HOOKS_ENV}='{}' {EXPECT_BACKEND_ENV}='{}'\n",
            o.mode, o.hooks, o.backend
        ));
    }
    if let Some(hooks) = lsm.agents_security_hooks() {
        exports.push_str(&format!("export {SECURITY_HOOKS_ENV}={hooks}\n"));
    }
    exports
}

/// How a row's `lsm=` setting reads in the table.
#[cfg(test)]
fn lsm_label(lsm: BootName) -> &'static str {
    match lsm {
        BootName::LsmBpf => "with `bpf`",
        BootName::FModRet => "without `bpf`",
        BootName::LsmNoBpf => "without `bpf`, fmod_ret off (`--security-hooks bpf-lsm`)",
        BootName::BelowFloor => "any",
    }
}

/// The table as docs/compatibility.md carries it.
#[cfg(test)]
pub(super) fn compatibility_markdown() -> String {
    let mut s = String::from(
        "| kernel | `lsm=` | mode (auto) | refused by | tracing backend (auto) | what is seen | what is refused |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for o in COMPATIBILITY {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            o.kernel.version(),
            lsm_label(o.lsm),
            o.mode,
            o.hooks,
            o.backend,
            o.seen,
            o.refused
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::{COMPATIBILITY, compatibility_markdown};
    use crate::vm::plan::{BOOTS, test_runs};

    /// Each row is asserted by a boot of `vm-test`: one on that kernel with that `lsm=`
    /// setting runs a test that compares the agent's choice with the row.
    #[test]
    fn every_row_is_asserted_by_a_boot() {
        const ASSERTING: &[&str] = &[
            "vm_enforce::with_bpf_in_lsm_auto_picks_the_mode_and_backend_the_matrix_says",
            "vm_enforce::without_bpf_in_lsm_auto_picks_the_mode_and_backend_the_matrix_says",
            "vm_floor::below_the_floor_the_agent_refuses_to_start_and_says_why",
        ];
        for row in COMPATIBILITY {
            let asserted = BOOTS
                .iter()
                .filter(|b| b.kernel == row.kernel && b.name == row.lsm)
                .any(|b| test_runs(b).iter().any(|(_, _, args)| args.iter().any(|a| ASSERTING.contains(a))));
            assert!(asserted, "no boot asserts the row of {} {:?}", row.kernel.version(), row.lsm);
        }
    }

    #[test]
    fn the_compatibility_doc_carries_the_table_the_boots_assert() {
        let table = compatibility_markdown();
        crate::vm::plan::check_generated("docs/compatibility.md", "compatibility", &table, "the_compatibility_doc");
    }
}

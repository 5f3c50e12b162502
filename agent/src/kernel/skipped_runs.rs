//! Runs of the agent's programs the kernel skipped. A tracing program is not run while
//! another BPF program runs on the same CPU (the kernel's recursion guard): on a
//! preemptible kernel a syscall's exit can then pass unseen, with no event and no
//! counter of the agent's own. The kernel counts the skips per program
//! (`recursion_misses` in the program's fdinfo): trampolines since 5.12, raw tracepoints
//! since 6.2, tracepoints and kprobes since 6.7. LSM programs are never skipped this way
//! (the kernel runs them without the guard), so only the others are read. An fmod_ret
//! program is a tracing program too: its skipped run is a call it did not judge.

use std::os::fd::{AsFd, AsRawFd};

use aya::programs::{Program, ProgramFd};
use tracing::warn;

use super::loader::LoadedObject;

/// The loaded programs the kernel may skip, held open to read their counts.
pub struct SkippedRuns {
    programs: Vec<(ProgramFd, ProgramRole)>,
    reported: [u64; 2],
}

/// What a program does, and so what its skipped run loses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ProgramRole {
    /// A mount or syscall record: its event is missing.
    Trace = 0,
    /// An fmod_ret guard program: the call it guards went through unjudged.
    Guard = 1,
}

impl SkippedRuns {
    pub fn new(object: &LoadedObject) -> Self {
        // A program not loaded (not attached in this mode) has no fd and is left out.
        let programs = object
            .ebpf
            .programs()
            .filter(|(_, p)| !matches!(p, Program::Lsm(_)))
            .filter_map(|(_, p)| {
                let role = if matches!(p, Program::FModRet(_)) { ProgramRole::Guard } else { ProgramRole::Trace };
                Some((p.fd().ok()?.try_clone().ok()?, role))
            })
            .collect();
        Self { programs, reported: [0; 2] }
    }

    /// Runs skipped so far, over those programs; logs a warning when a role's total grew.
    /// `None` where the kernel keeps no such count (before 5.12).
    pub fn check(&mut self) -> Option<u64> {
        let mut totals: [Option<u64>; 2] = [None, None];
        for (program, role) in &self.programs {
            let fdinfo = format!("/proc/self/fdinfo/{}", program.as_fd().as_raw_fd());
            let skipped = std::fs::read_to_string(fdinfo).ok().and_then(|text| recursion_misses(&text));
            if let Some(n) = skipped {
                let total = &mut totals[*role as usize];
                *total = Some(total.unwrap_or(0) + n);
            }
        }
        for role in [ProgramRole::Trace, ProgramRole::Guard] {
            let reported = &mut self.reported[role as usize];
            let Some(total) = totals[role as usize].filter(|t| t > reported) else { continue };
            let skipped = total - *reported;
            match role {
                ProgramRole::Trace => warn!(
                    "{skipped} runs of volguard's tracing programs skipped by the kernel (another BPF program was \
                     running on the CPU): their events are missing; the mount table is read again"
                ),
                ProgramRole::Guard => warn!(
                    "{skipped} calls went through volguard's fmod_ret guard unjudged: the kernel skipped its program \
                     (another BPF program was running on the CPU; BPF LSM has no such skip)"
                ),
            }
            *reported = total;
        }
        match totals {
            [None, None] => None,
            [trace, guard] => Some(trace.unwrap_or(0) + guard.unwrap_or(0)),
        }
    }
}

/// The `recursion_misses` line of a BPF program's fdinfo.
fn recursion_misses(fdinfo: &str) -> Option<u64> {
    fdinfo.lines().find_map(|line| line.strip_prefix("recursion_misses:")?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_is_read_from_a_programs_fdinfo() {
        let fdinfo = "pos:\t0\nflags:\t02000002\nmnt_id:\t16\nino:\t2084\nprog_type:\t5\nprog_jited:\t1\n\
                      prog_tag:\t3b185187f1855c4c\nmemlock:\t4096\nprog_id:\t45\nrun_time_ns:\t0\nrun_cnt:\t0\n\
                      recursion_misses:\t7\nverified_insns:\t12\n";
        assert_eq!(recursion_misses(fdinfo), Some(7));
        assert_eq!(recursion_misses("prog_type:\t5\nrun_cnt:\t0\n"), None, "a kernel without the count");
        assert_eq!(recursion_misses("recursion_misses:\tx\n"), None);
    }
}

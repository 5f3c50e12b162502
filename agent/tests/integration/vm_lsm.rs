//! Tests of the probe that proves the kernel refuses, as BPF LSM and as fmod_ret. This
//! host's kernel refuses both, so these run inside a VM (`cargo xtask vm-test`) booted once
//! with `bpf` in `lsm=` and once without it.

use std::{fs, path::PathBuf};

use nix::{
    errno::Errno,
    mount::{MsFlags, mount},
};
use volguard::{
    kernel::lsm_probe::{self, LSM_LIST, LsmStatus},
    kernel::{
        counters::Counters,
        loader::{self, LoadedObject, SecurityHooks},
    },
    sys::mountns::run_in_private_mount_ns,
};
use volguard_common::counters::Counter;

use crate::support::{bpf_in_lsm_list, make_dirs};

fn active_lsms() -> String {
    fs::read_to_string(LSM_LIST).expect("securityfs mounted").trim().to_owned()
}

/// `source`, `other` and `target` directories in a fresh temporary directory.
fn scratch() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let [source, other, target] = make_dirs(tmp.path(), ["source", "other", "target"]);
    (tmp, source, other, target)
}

/// Binds `source` then `other` onto `target` in a private mount namespace.
fn bind_both(source: PathBuf, other: PathBuf, target: PathBuf) -> (nix::Result<()>, nix::Result<()>) {
    run_in_private_mount_ns("vg-lsm-test", move || {
        (
            mount(Some(&source), &target, None::<&str>, MsFlags::MS_BIND, None::<&str>),
            mount(Some(&other), &target, None::<&str>, MsFlags::MS_BIND, None::<&str>),
        )
    })
    .unwrap()
}

#[test]
#[ignore = "needs a kernel booted with bpf in lsm=: runs in the VM (cargo xtask vm-test)"]
fn lsm_active_refuses_only_the_probe_bind() {
    assert!(bpf_in_lsm_list(), "precondition: booted with bpf in lsm=, active LSMs are {}", active_lsms());
    refuses_only_the_probe_bind(SecurityHooks::BpfLsm);
}

/// The probe program attached `via` refuses its own bind and no other; the agent's probe
/// reaches the same verdict.
fn refuses_only_the_probe_bind(via: SecurityHooks) {
    {
        let mut ebpf = LoadedObject::load().unwrap();
        ebpf.attach(&[loader::lsm_probe_hook(via)]).unwrap_or_else(|e| panic!("the {via} probe program attaches: {e}"));
        let (_tmp, source, other, target) = scratch();
        lsm_probe::set_probe_source(&mut ebpf, Some(&source)).unwrap();

        let (probe_bind, other_bind) = bind_both(source, other, target);
        assert_eq!(probe_bind, Err(Errno::EBUSY), "the probe source is refused in the kernel");
        assert_eq!(other_bind, Ok(()), "any other bind mount goes through");
        let counters = Counters::new(&mut ebpf).unwrap();
        assert_eq!(counters.get(Counter::LsmProbeDenied), 1);
        assert!(counters.get(Counter::LsmSbMountRuns) >= 2, "the program ran for both mounts");
    }
    let report = lsm_probe::probe(&mut LoadedObject::load().unwrap(), via).unwrap();
    assert_eq!(report.status, LsmStatus::Active, "{report:?}");
}

#[test]
#[ignore = "needs a kernel booted without bpf in lsm=: runs in the VM (cargo xtask vm-test)"]
fn lsm_inactive_program_attaches_but_never_runs() {
    assert!(!bpf_in_lsm_list(), "precondition: booted without bpf in lsm=, active LSMs are {}", active_lsms());
    {
        let mut ebpf = LoadedObject::load().unwrap();
        ebpf.attach(&[loader::lsm_probe_hook(SecurityHooks::BpfLsm)])
            .expect("the LSM program still loads and attaches without bpf in lsm=");
        let (_tmp, source, other, target) = scratch();
        lsm_probe::set_probe_source(&mut ebpf, Some(&source)).unwrap();

        let (probe_bind, other_bind) = bind_both(source, other, target);
        assert_eq!((probe_bind, other_bind), (Ok(()), Ok(())), "nothing is refused");
        assert_eq!(Counters::new(&mut ebpf).unwrap().get(Counter::LsmSbMountRuns), 0, "the program never ran");
    }
    let report = lsm_probe::probe(&mut LoadedObject::load().unwrap(), SecurityHooks::BpfLsm).unwrap();
    let LsmStatus::Inactive { reason } = &report.status else { panic!("expected inactive: {report:?}") };
    assert!(reason.contains("never ran"), "{reason}");
    assert_eq!(report.sb_mount_runs, 0);
}

/// Where `bpf` is not in `lsm=`, the same probe program attached as fmod_ret on
/// `security_sb_mount` refuses its bind (and only it): what `--mode auto` takes there.
#[test]
#[ignore = "needs a kernel booted without bpf in lsm=, with trampolines: runs in the VM (cargo xtask vm-test)"]
fn fmod_ret_refuses_only_the_probe_bind_without_bpf_lsm() {
    assert!(!bpf_in_lsm_list(), "precondition: booted without bpf in lsm=, active LSMs are {}", active_lsms());
    refuses_only_the_probe_bind(SecurityHooks::FModRet);
}

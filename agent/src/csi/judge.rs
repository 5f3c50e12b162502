//! The CSI judgement, kept between runs: a run rebuilds only the volumes whose input
//! changed ([`VolumeInput`]) and reuses the rest, so news about one volume on a node with
//! 10,000 costs one volume's work plus a comparison per volume. A change of what every
//! volume depends on (the drivers' answers, the CSIDriver objects, the kubelet, the mode)
//! starts over.

use std::{collections::HashMap, sync::Arc};

use super::{
    driver_report::DriverReport,
    evaluate::{self, Context, VolumeInput, VolumeKind, VolumeReport},
    kubelet::KubeletReport,
    report::CsiReport,
};
use crate::{
    enforce::Mode,
    facts::{CsiDriver, Facts},
    model::{checks::Finding, mounts::Mounts},
};

/// The judgements of the last run, by volume.
#[derive(Default)]
pub struct Judge {
    shared: Option<SharedInputs>,
    volumes: HashMap<VolumeId, Judged>,
    rebuilt: usize,
}

/// What every volume's judgement depends on.
#[derive(PartialEq)]
struct SharedInputs {
    drivers: Vec<DriverReport>,
    csi_drivers: Vec<CsiDriver>,
    kubelet: KubeletReport,
    mode: Option<Mode>,
}

/// A persistent volume by PV name; an inline volume by pod UID and volume name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct VolumeId {
    kind: VolumeKind,
    name: String,
    pod: String,
}

impl VolumeId {
    fn of(input: &VolumeInput<'_>) -> Self {
        let pod = match input.kind {
            VolumeKind::Persistent => String::new(),
            VolumeKind::Inline => input.pods.first().map_or_else(String::new, |&p| p.to_owned()),
        };
        Self { kind: input.kind, name: input.name.to_owned(), pod }
    }
}

struct Judged {
    /// The input's parts that the report does not carry.
    fs_type: Option<String>,
    block: bool,
    report: Arc<VolumeReport>,
    findings: Vec<Finding>,
}

impl Judged {
    fn new(ctx: &Context<'_>, input: &VolumeInput<'_>) -> Self {
        let report = input.report(ctx);
        let findings = evaluate::volume_findings(ctx, &report);
        Self { fs_type: input.fs_type.map(str::to_owned), block: input.block, report: Arc::new(report), findings }
    }

    fn judges(&self, input: &VolumeInput<'_>) -> bool {
        let r = &*self.report;
        r.driver == input.driver
            && r.pods == input.pods
            && r.published == input.published
            && r.access_modes == input.access_modes
            && self.fs_type.as_deref() == input.fs_type
            && self.block == input.block
    }
}

impl Judge {
    /// Judges gathered drivers against facts and mounts (no I/O); the same result as a
    /// new `Judge` would give.
    pub fn run(&mut self, drivers: Vec<DriverReport>, facts: &Facts, mounts: &Mounts, mode: Option<Mode>) -> CsiReport {
        let mut drivers = drivers;
        for driver in &mut drivers {
            driver.apply_facts(facts);
        }
        let ctx = Context::new(facts, &drivers, mode);
        let shared = SharedInputs {
            drivers: drivers.clone(),
            csi_drivers: facts.csi_drivers.clone(),
            kubelet: ctx.kubelet.clone(),
            mode,
        };
        if self.shared.as_ref() != Some(&shared) {
            self.volumes.clear();
            self.shared = Some(shared);
        }

        let inputs = evaluate::inputs(facts, mounts);
        let mut previous = std::mem::take(&mut self.volumes);
        self.volumes.reserve(inputs.len());
        self.rebuilt = 0;
        let mut volumes = Vec::with_capacity(inputs.len());
        let mut findings = evaluate::driver_findings(&ctx);
        let mut flagged_drivers = Default::default();
        for input in &inputs {
            let id = VolumeId::of(input);
            let judged = match previous.remove(&id) {
                Some(judged) if judged.judges(input) => judged,
                _ => {
                    self.rebuilt += 1;
                    Judged::new(&ctx, input)
                }
            };
            findings.extend(evaluate::persistent_mode_unsupported(&ctx, &judged.report, &mut flagged_drivers));
            findings.extend(judged.findings.iter().cloned());
            volumes.push(Arc::clone(&judged.report));
            self.volumes.insert(id, judged);
        }
        CsiReport { kubelet: ctx.kubelet, drivers, volumes, findings, checked_at: None }
    }

    /// How many volumes the last run judged anew (the others were unchanged).
    pub fn rebuilt(&self) -> usize {
        self.rebuilt
    }

    /// How many volumes the last run judged.
    pub fn volumes(&self) -> usize {
        self.volumes.len()
    }
}

impl CsiReport {
    /// Judges gathered drivers against facts and mounts (no I/O); the agent keeps a
    /// [`Judge`] instead, to rebuild only what changed.
    pub fn judge(drivers: Vec<DriverReport>, facts: &Facts, mounts: &Mounts, mode: Option<Mode>) -> Self {
        Judge::default().run(drivers, facts, mounts, mode)
    }
}

use super::*;
use crate::model::checks::{Check, Severity};

fn claim(ns: &str, name: &str) -> ClaimRef {
    ClaimRef { namespace: ns.into(), name: name.into() }
}

#[test]
fn the_storage_histogram_has_kubelets_name_labels_and_buckets() {
    let m = Metrics::new();
    m.operations.storage_operation("kubernetes.io/csi:d.example.com".into(), OperationName::VolumeMount, true, 0.3);
    m.operations.storage_operation("kubernetes.io/csi:d.example.com".into(), OperationName::VolumeMount, false, 700.0);
    let text = m.encode();
    assert!(text.contains("# TYPE storage_operation_duration_seconds histogram"), "{text}");
    assert!(text.contains("# UNIT storage_operation_duration_seconds seconds"));
    let bucket = |le: &str, status: &str| {
        format!(
            "storage_operation_duration_seconds_bucket{{le=\"{le}\",volume_plugin=\"kubernetes.io/csi:d.example.com\",\
             operation_name=\"volume_mount\",status=\"{status}\",migrated=\"false\"}}"
        )
    };
    // 0.3 s falls in the 0.5 bucket, not the 0.25 one.
    assert!(text.contains(&format!("{} 0\n", bucket("0.25", "success"))), "{text}");
    assert!(text.contains(&format!("{} 1\n", bucket("0.5", "success"))), "{text}");
    assert!(text.contains(&format!("{} 0\n", bucket("600.0", "fail-unknown"))), "{text}");
    assert!(text.contains(&format!("{} 1\n", bucket("+Inf", "fail-unknown"))), "{text}");
    let les: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("status=\"success\"") && l.contains("_bucket"))
        .filter_map(|l| l.split("le=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(
        les,
        ["0.1", "0.25", "0.5", "1.0", "2.5", "5.0", "10.0", "15.0", "25.0", "50.0", "120.0", "300.0", "600.0", "+Inf"]
    );
    assert!(text.ends_with("# EOF\n"));
}

#[test]
fn conflicts_are_labelled_by_claim_and_action_and_removed_with_the_claim() {
    let m = Metrics::new();
    m.conflicts.conflict(Some(&claim("shop", "data")), ConflictAction::Refused, Route::Publish);
    m.conflicts.conflict(Some(&claim("shop", "data")), ConflictAction::Refused, Route::Publish);
    m.conflicts.conflict(Some(&claim("shop", "logs")), ConflictAction::Quarantined, Route::Publish);
    m.conflicts.conflict(None, ConflictAction::Audited, Route::Publish);
    let text = m.encode();
    assert!(
        text.contains(
            "volguard_conflicts_total{namespace=\"shop\",persistentvolumeclaim=\"data\",action=\"blocked\",route=\"publish\"} 2"
        ),
        "{text}"
    );
    assert!(text.contains("persistentvolumeclaim=\"logs\",action=\"quarantined\",route=\"publish\"} 1"));
    assert!(text.contains(
        "namespace=\"_unknown\",persistentvolumeclaim=\"_unknown\",action=\"observed\",route=\"publish\"} 1"
    ));
    m.conflicts.forget_claims_except(|c| *c == claim("shop", "data"));
    let text = m.encode();
    assert!(!text.contains("\"logs\""), "the deleted PVC's series is gone");
    assert!(text.contains("\"data\"") && text.contains("_unknown"));
}

#[test]
fn the_reference_lists_every_family_with_its_labels() {
    let docs = reference();
    let names: Vec<&str> = docs.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "storage_operation_duration_seconds",
            "volguard_mount_syscalls_total",
            "volguard_events_lost_total",
            "volguard_bpf_runs_skipped_total",
            "volguard_conflicts_total",
            "volguard_single_pod_volumes",
            "volguard_quarantined_publishes",
            "volguard_quarantine_masks_removed_total",
            "volguard_enforcement_mode",
            "volguard_trace_backend",
            "volguard_trace_fallback_syscalls",
            "volguard_csi_driver_info",
            "volguard_csi_findings",
            "volguard_node_findings",
            "volguard_inventory_info",
            "volguard_inventory_stale",
            "volguard_inventory_last_sync_timestamp_seconds",
            "volguard_mount_notifications_total",
            "volguard_mount_notifications_skipped_total",
            "volguard_mount_notification_resyncs_total",
            "volguard_metrics_requests_total",
            "volguard_build_info",
            "volguard_kernel_events_total",
            "volguard_decode_errors_total",
            "volguard_bpf_stats_enabled",
            "volguard_bpf_program_runs_total",
            "volguard_bpf_program_run_seconds_total",
            "volguard_node_process_opens_total",
        ]
    );
    assert_eq!(docs[0].labels, ["volume_plugin", "operation_name", "status", "migrated"]);
    assert_eq!(docs[0].kind, "histogram");
    assert!(docs.iter().all(|d| !d.help.is_empty()), "{docs:#?}");
    assert!(reference_markdown().contains(
        "| `volguard_conflicts_total` | counter | `namespace`, `persistentvolumeclaim`, `action`, `route` |"
    ));
}

#[test]
fn the_metrics_doc_carries_the_current_reference() {
    let readme = include_str!("../../../../docs/metrics.md");
    let section = readme.split("<!-- metrics-reference:start").nth(1).expect("docs/metrics.md's reference markers");
    let body = section.split_once("-->\n").expect("the start marker's end").1;
    let body = body.split("<!-- metrics-reference:end -->").next().unwrap_or_default();
    assert_eq!(body, reference_markdown(), "regenerate the table in docs/metrics.md with `volguard metrics-reference`");
}

#[test]
fn conflict_series_are_capped() {
    let m = Metrics::new();
    for i in 0..MAX_CONFLICT_SERIES + 50 {
        m.conflicts.conflict(Some(&claim("ns", &format!("pvc-{i}"))), ConflictAction::Refused, Route::Publish);
    }
    let text = m.encode();
    let series = text.lines().filter(|l| l.starts_with("volguard_conflicts_total{")).count();
    assert_eq!(series, MAX_CONFLICT_SERIES + 1, "the cap plus one _other series");
    assert!(
        text.contains("namespace=\"_other\",persistentvolumeclaim=\"_other\",action=\"blocked\",route=\"publish\"} 50")
    );
}

#[test]
fn gauges_replace_their_previous_values() {
    let m = Metrics::new();
    use crate::enforce::Mode;
    let decided = |mode, reason| ModeDecision {
        mode,
        decided_in: crate::enforce::DecidedIn::Kernel,
        reason,
        hooks: Some(crate::kernel::loader::SecurityHooks::BpfLsm),
    };
    m.mode.set_mode(&decided(Mode::Quarantine, crate::enforce::ModeReason::NoBpfLsm("EPERM".into())));
    m.mode.set_mode(&decided(Mode::Enforce, crate::enforce::ModeReason::LsmActive));
    use crate::kernel::trace_backend::{BackendChoice, TrampolineProbe, decide};
    m.mode.set_trace_backend(&decide(BackendChoice::Tracepoints, false, None, None).unwrap());
    let works = TrampolineProbe::Works { missing: vec!["umount"] };
    m.mode.set_trace_backend(&decide(BackendChoice::Auto, false, Some(&works), None).unwrap());
    let finding = Finding {
        check: Check::InlineHandleMismatch,
        severity: Severity::Error,
        subject: "x".into(),
        message: "m".into(),
    };
    m.findings.set_node_findings([&finding, &finding]);
    m.facts.set_source(&Origin::KubernetesApi, true, Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(5)));
    m.operations.set_events_lost(3);
    m.operations.set_events_lost(7);
    m.conflicts.set_single_pod(SinglePodCounts { owned: 2, unowned: 1, shared: 0, quarantined_publishes: 3 });
    m.operations.syscall("mount", true);
    let text = m.encode();
    assert!(text.contains("volguard_enforcement_mode{mode=\"enforce\",reason=\"lsm_active\"} 1"), "{text}");
    assert!(!text.contains("mode=\"quarantine\""));
    assert!(text.contains("volguard_trace_backend{backend=\"trampolines\",reason=\"trampolines_work\"} 1"), "{text}");
    assert!(!text.contains("backend=\"tracepoints\""));
    assert!(text.contains("volguard_trace_fallback_syscalls 1"), "{text}");
    assert!(text.contains("volguard_node_findings{check=\"inline_handle_mismatch\",severity=\"error\"} 2"));
    assert!(text.contains("volguard_inventory_info{source=\"kubernetes_api\"} 1"));
    assert!(text.contains("volguard_inventory_stale 1"));
    assert!(text.contains("volguard_inventory_last_sync_timestamp_seconds 5.0"));
    assert!(text.contains("volguard_events_lost_total 7"));
    assert!(text.contains("volguard_quarantined_publishes 3"), "{text}");
    assert!(text.contains("volguard_single_pod_volumes{state=\"owned\"} 2"));
    assert!(text.contains("volguard_mount_syscalls_total{syscall=\"mount\",result=\"success\"} 1"));
    assert!(text.contains(&format!("volguard_build_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION"))));
}

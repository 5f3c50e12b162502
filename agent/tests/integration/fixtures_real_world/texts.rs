//! Category 3 of the real-world samples: kubelet paths quoted in logs and Events, each
//! classified with its node's kubelet root.

use super::*;

// Long by design: one row per real-world sample, read as a table.
fn text_expectations() -> Vec<Expect> {
    let smb_staging = "/var/lib/kubelet/plugins/kubernetes.io/csi/smb.csi.k8s.io/6eede1929b708423990deaef8efd0ddc79452b5dd7012f2b551c5ca5772e71d5/globalmount";
    let smb_publish = "/var/lib/kubelet/pods/737fd7af-d844-491e-8b4d-21227a7cb697/volumes/kubernetes.io~csi/aicp-local-pv-ae308314-e8c4-443d-a9a1-dee92cc53759/mount";
    vec![
        expect(
            "cat3_csi_driver_log_ebs_migrated_pv_name_with_colon_slash.log",
            DEFAULT_ROOT,
            vec![(
                "/var/lib/kubelet/plugins/kubernetes.io/csi/pv/ebs.csi.aws.com-aws:/us-west-2a/vol-0a4910df43136ea3e/globalmount",
                legacy("ebs.csi.aws.com-aws:/us-west-2a/vol-0a4910df43136ea3e"),
            )],
        ),
        expect(
            "cat3_event_FailedMount_rbd_custom_kubelet_root_data_k8s.txt",
            "/data/k8s/kubelet",
            vec![(
                "/data/k8s/kubelet/plugins/kubernetes.io/csi/rbd.csi.ceph.com/dbe13b4485d6eb6a44aa77bb8d812f82927b4848e60aa33f5b49a94bda13e486/globalmount",
                staging("rbd.csi.ceph.com", "dbe13b4485d6eb6a44aa77bb8d812f82927b4848e60aa33f5b49a94bda13e486"),
            )],
        ),
        expect(
            "cat3_event_FailedMount_rook_microk8s_pv_staging_missing.txt",
            MICROK8S_ROOT,
            vec![(
                "/var/snap/microk8s/common/var/lib/kubelet/plugins/kubernetes.io/csi/pv/pvc-3f35725e-ec90-429c-a230-b8c483f84a7c/globalmount",
                legacy("pvc-3f35725e-ec90-429c-a230-b8c483f84a7c"),
            )],
        ),
        expect(
            "cat3_event_FailedMount_smb_sha256_globalmount_multiline.txt",
            DEFAULT_ROOT,
            vec![
                (
                    smb_staging,
                    staging("smb.csi.k8s.io", "6eede1929b708423990deaef8efd0ddc79452b5dd7012f2b551c5ca5772e71d5"),
                ),
                (
                    smb_publish,
                    publish(
                        "737fd7af-d844-491e-8b4d-21227a7cb697",
                        "aicp-local-pv-ae308314-e8c4-443d-a9a1-dee92cc53759",
                    ),
                ),
            ],
        ),
        expect(
            "cat3_event_FailedMount_topolvm_direct_publish_mount_args.txt",
            DEFAULT_ROOT,
            vec![(
                "/var/lib/kubelet/pods/2b4a6426-b43e-4798-a959-9274335e8a36/volumes/kubernetes.io~csi/pvc-89c14e5b-a82f-4f16-8250-f8a2298c7bcb/mount",
                publish("2b4a6426-b43e-4798-a959-9274335e8a36", "pvc-89c14e5b-a82f-4f16-8250-f8a2298c7bcb"),
            )],
        ),
        expect(
            "cat3_event_FailedMount_vsphere_microk8s_root_not_pre_created.txt",
            MICROK8S_ROOT,
            vec![(
                "/var/snap/microk8s/common/var/lib/kubelet/plugins/kubernetes.io/csi/csi.vsphere.vmware.com/2d1572c99aa1abb2ae84760b5b45b331f97fbedcbb046e13a82c544ef5e7f727/globalmount",
                staging("csi.vsphere.vmware.com", "2d1572c99aa1abb2ae84760b5b45b331f97fbedcbb046e13a82c544ef5e7f727"),
            )],
        ),
        // The node bind-mounts /mnt/kubelet onto /var/lib/kubelet: the same staging mount
        // under a second name, which is not under the configured root.
        expect(
            "cat3_kubelet_log_GetDeviceMountRefs_ebs_bind_mounted_root.log",
            DEFAULT_ROOT,
            vec![(
                "/var/lib/kubelet/plugins/kubernetes.io/csi/pv/pvc-19942473-fee2-45d0-8136-60e31ebfb40a/globalmount",
                legacy("pvc-19942473-fee2-45d0-8136-60e31ebfb40a"),
            )],
        ),
        expect(
            "cat3_kubelet_log_TearDown_failed_ebs_curly_quote.log",
            DEFAULT_ROOT,
            vec![(
                "/var/lib/kubelet/pods/884bc944-bba7-4b18-838c-6a9e777899c9/volumes/kubernetes.io~csi/pvc-2b7f37ef-6561-4601-bf91-f6caa8e984e8/mount",
                publish("884bc944-bba7-4b18-838c-6a9e777899c9", "pvc-2b7f37ef-6561-4601-bf91-f6caa8e984e8"),
            )],
        ),
        // Paths in category 2's shell output: vol_data.json files and directories are not
        // mount points; the globalmount in `ls`'s error message is.
        expect(
            "cat2_vol_data_json_ls_pod_dir_vs_staging_dir.txt",
            DEFAULT_ROOT,
            vec![(
                "/var/lib/kubelet/plugins/kubernetes.io/csi/pv/pvc-9174936d-f9d0-493b-87f2-49f1fb5835fe/globalmount",
                legacy("pvc-9174936d-f9d0-493b-87f2-49f1fb5835fe"),
            )],
        ),
        expect("cat2_vol_data_json_empty_issue_excerpt.txt", DEFAULT_ROOT, vec![]),
    ]
}

#[test]
fn paths_quoted_in_logs_and_events_are_classified_with_their_node_root() {
    let expectations = text_expectations();
    let covered: BTreeSet<&str> = expectations.iter().map(|e| e.file).collect();
    for e in &expectations {
        let paths: Vec<Vec<u8>> = paths_in_text(&read_text(e.file)).into_iter().map(String::into_bytes).collect();
        check(e, &paths);
    }
    // The other category-3 files quote no kubelet or runtime path; every path-like token in
    // them (if any) must be Other, and nothing may panic.
    for file in data_files("cat3_").iter().filter(|f| !covered.contains(f.as_str())) {
        let text = read_text(file);
        for path in paths_in_text(&text) {
            assert_eq!(classify_bytes(DEFAULT_ROOT, path.as_bytes()), PathKind::Other, "{file}: {path}");
        }
    }
}

#[test]
fn the_second_name_of_a_bind_mounted_kubelet_root() {
    let text = read_text("cat3_kubelet_log_GetDeviceMountRefs_ebs_bind_mounted_root.log");
    let other = "/mnt/kubelet/plugins/kubernetes.io/csi/pv/pvc-19942473-fee2-45d0-8136-60e31ebfb40a/globalmount";
    assert!(paths_in_text(&text).iter().any(|p| p == other));
    assert_eq!(classify_bytes(DEFAULT_ROOT, other.as_bytes()), PathKind::Other);
    assert_eq!(classify_bytes("/mnt/kubelet", other.as_bytes()), legacy("pvc-19942473-fee2-45d0-8136-60e31ebfb40a"));
}

#[test]
fn non_default_roots_do_not_match_the_default() {
    for (file, root) in [
        ("cat3_event_FailedMount_rbd_custom_kubelet_root_data_k8s.txt", "/data/k8s/kubelet"),
        ("cat3_event_FailedMount_rook_microk8s_pv_staging_missing.txt", MICROK8S_ROOT),
        ("cat3_event_FailedMount_vsphere_microk8s_root_not_pre_created.txt", MICROK8S_ROOT),
    ] {
        let paths: Vec<String> = paths_in_text(&read_text(file)).into_iter().filter(|p| p.starts_with(root)).collect();
        assert_eq!(paths.len(), 1, "{file}");
        assert_eq!(classify_bytes(DEFAULT_ROOT, paths[0].as_bytes()), PathKind::Other, "{file}");
    }
}

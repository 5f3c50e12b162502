//! Category 4 of the real-world samples: cgroup paths and files, from every runtime and
//! driver the samples show, read by `node_files::cgroup`.

use super::*;

fn pod(uid: &str, qos: QosClass, container: Option<&str>, runtime: Option<Runtime>) -> Option<PodCgroup> {
    Some(PodCgroup { pod_uid: uid.into(), qos, container_id: container.map(str::to_owned), runtime })
}

fn lines(file: &str) -> Vec<String> {
    read_text(file).lines().map(str::to_owned).collect()
}

#[test]
fn cgroup_containerd_colon_form_under_containerd_service() {
    let file = "cat4_proc_self_cgroup_name_systemd_containerd_service.cgroup";
    let want = pod(
        "ff49d0be-16b7-4a49-bb9e-8ec1f1f4e27f",
        QosClass::Burstable,
        Some("0f99ad5f45163ed14ab8eaf92ed34bb4a631d007f8755a7d79be614bcb0df0ef"),
        Some(Runtime::Containerd),
    );
    assert_eq!(lines(file).len(), 1);
    assert_eq!(cgroup::parse(lines(file)[0].as_bytes()), want);
    assert_eq!(cgroup::parse_proc_file(&read(file)), want);
}

#[test]
fn cgroup_crio_scope_and_the_files_controller() {
    let file = "cat4_proc_pid_cgroup_v1_systemd_crio_scope.cgroup";
    let want = pod(
        "a5c1f8d5-1919-434d-add7-4afaafdaef89",
        QosClass::Burstable,
        Some("5eed917563583925ffdbd40a64efb2aaffe58638e57add8becaf460fe74f5b1c"),
        Some(Runtime::Crio),
    );
    let got: Vec<_> = lines(file).iter().map(|l| cgroup::parse(l.as_bytes())).collect();
    assert_eq!(got, vec![want.clone(), want.clone(), None], "13:freezer, 12:cpuset, 11:files:/");
    assert_eq!(cgroup::parse_proc_file(&read(file)), want);
}

#[test]
fn cgroup_docker_scope_behind_a_ci_log_prefix() {
    let file = "cat4_proc_self_cgroup_v1_systemd_docker_timestamp_prefixed.txt";
    let want = pod(
        "7d4424e6-bb13-42f4-a47a-45a4828bf54d",
        QosClass::Burstable,
        Some("d0b3604b67ac7930dd34ba3a796627e3e4717d12309e90a4afe3f38b6816ac98"),
        Some(Runtime::Docker),
    );
    let stripped: Vec<String> = lines(file)
        .iter()
        .map(|l| {
            // " 2021-06-29 09:59:08.932 |  <line>"
            let (prefix, rest) = l.split_once(" |  ").unwrap_or_else(|| panic!("no CI prefix in {l}"));
            assert_eq!(prefix, " 2021-06-29 09:59:08.932");
            rest.to_owned()
        })
        .collect();
    assert_eq!(stripped[0], "12:rdma:/");
    assert_eq!(cgroup::parse(stripped[0].as_bytes()), None);
    for line in &stripped[1..] {
        assert_eq!(cgroup::parse(line.as_bytes()), want, "{line}");
    }
    assert_eq!(cgroup::parse_proc_file(stripped.join("\n").as_bytes()), want);
    // Unstripped, the line is not `N:controllers:path` and is read as a bare path; anything
    // above the pod level is ignored, so the pod slice is still found.
    assert_eq!(cgroup::parse(lines(file)[1].as_bytes()), want);
}

#[test]
fn cgroup_legacy_besteffort_slice_under_docker_service() {
    let file = "cat4_proc_self_cgroup_legacy_BestEffort_slice_driver_mismatch.cgroup";
    let want = pod(
        "0d33f94b-ab1a-11e6-9e1a-68f7281d8004",
        QosClass::BestEffort,
        Some("0c34bcd7d02f321d0df7aa6ea703285b02abebc9096c5128c14091fc43ea1f3b"),
        None,
    );
    for line in lines(file) {
        assert_eq!(cgroup::parse(line.as_bytes()), want, "{line}");
    }
}

#[test]
fn cgroup_root_column_of_an_in_pod_mountinfo() {
    let file = "cat4_mountinfo_cgroupfs_v1_root_kubepods_besteffort_pod_container.mountinfo";
    let bytes = read(file);
    let parsed: Vec<MountinfoLine> =
        bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()).filter_map(parse_mountinfo_line).collect();
    assert_eq!(parsed.len(), 7);
    let found: Vec<_> = parsed.iter().filter(|l| l.fstype == b"cgroup").map(|l| cgroup::parse(&l.root)).collect();
    assert_eq!(
        found,
        vec![pod(
            "85401dd3-38cd-47b6-a90a-e16c0e1c06e6",
            QosClass::BestEffort,
            Some("dbc9f149296cec5d12b78385eb5b2c0cfe20b476f117c15c76d981cff44053c1"),
            None,
        )]
    );
    for line in parsed.iter().filter(|l| l.fstype != b"cgroup") {
        assert_eq!(cgroup::parse(&line.root), None);
    }
}

#[test]
fn cgroup_k3d_mountinfo_roots_are_a_node_container_not_a_pod() {
    let bytes = read("cat1_mountinfo_k3s_in_docker_containerd_v1_linux_rootfs.mountinfo");
    let cgroup_roots: Vec<Vec<u8>> = bytes
        .split(|&b| b == b'\n')
        .filter_map(parse_mountinfo_line)
        .filter(|l| l.fstype == b"cgroup")
        .map(|l| l.root)
        .collect();
    assert_eq!(cgroup_roots.len(), 2);
    for root in cgroup_roots {
        assert!(root.starts_with(b"/docker/"));
        assert_eq!(cgroup::parse(&root), None);
    }
}

#[test]
fn cgroup_cgroupfs_v2_path_in_a_gvisor_event() {
    let file = "cat4_cgroupfs_v2_kubepods_besteffort_pod_gvisor_event.txt";
    let paths: Vec<String> =
        paths_in_text(&read_text(file)).into_iter().filter(|p| p.starts_with("/sys/fs/cgroup/")).collect();
    assert_eq!(paths, vec!["/sys/fs/cgroup/kubepods/besteffort/pod88bcf96e-7b92-4ce5-a3c0-2a6d098a1c33/cgroup.procs"]);
    // `cgroup.procs` is a file in the pod's cgroup, not a container.
    assert_eq!(
        cgroup::parse(paths[0].as_bytes()),
        pod("88bcf96e-7b92-4ce5-a3c0-2a6d098a1c33", QosClass::BestEffort, None, None)
    );
}

#[test]
fn cgroup_kind_nested_kubelet_slice_absolute_and_relative() {
    let file = "cat4_cgroup_v2_kind_nested_kubelet_slice_nri_log.log";
    let uid = "1e597579-417e-482f-bf65-5fe170c3aebd";
    let ids = [
        "d7dfb4a21fe1703a8537e60d5af248af729315d187b24a538102d14874c8117d", // the pod sandbox
        "a09bc17f5aa29b0dbdec9ede5f46cf1396d2405917ab02e6f1eb1019f388396e", // an app container
    ];
    let lines = lines(file);
    assert_eq!(lines.len(), ids.len());
    for (line, id) in lines.iter().zip(ids) {
        let want = pod(uid, QosClass::BestEffort, Some(id), Some(Runtime::Containerd));
        let absolute: Vec<String> =
            paths_in_text(line).into_iter().filter(|p| p.starts_with("/sys/fs/cgroup/kubelet.slice/")).collect();
        assert_eq!(absolute.len(), 1, "{line}");
        assert_eq!(cgroup::parse(absolute[0].as_bytes()), want, "{line}");
        let relative = line.split("relativePath=\"").nth(1).and_then(|r| r.split('"').next()).expect("relativePath");
        assert_eq!(cgroup::parse(relative.as_bytes()), want, "{relative}");
    }
}

/// Rebuilds full cgroup paths from `systemctl status`'s tree: the `CGroup:` line is the
/// root, and each tree line's depth is its number of two-column drawing units (`├─`, `└─`,
/// `│ `, two spaces). Process lines (`<pid> <cmd>`) are leaves and are skipped.
fn systemctl_tree_paths(text: &str) -> Vec<String> {
    let mut lines = text.lines().skip_while(|l| !l.trim_start().starts_with("CGroup: "));
    let root_line = lines.next().expect("CGroup: line");
    let slash = root_line.find('/').expect("root path");
    let indent = root_line[..slash].chars().count();
    let mut stack = vec![root_line[slash..].to_owned()];
    let mut paths = vec![stack[0].clone()];
    for line in lines {
        let tree: Vec<char> = line.chars().skip(indent).collect();
        let units =
            tree.chunks(2).take_while(|u| matches!(u, ['├', '─'] | ['└', '─'] | ['│', ' '] | [' ', ' '])).count();
        let name: String = tree[units * 2..].iter().collect();
        if units == 0 || units > stack.len() || name.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        stack.truncate(units);
        let path = format!("{}/{name}", stack[units - 1]);
        stack.push(path.clone());
        paths.push(path);
    }
    paths
}

#[test]
fn cgroup_systemctl_tree_of_crio_scopes_in_a_docker_node() {
    let file = "cat4_systemctl_status_kubepods_slice_crio_scopes_in_docker.txt";
    let paths = systemctl_tree_paths(&read_text(file));
    let node = "/docker/d6701ec289c56e4391acb11d07474b3139466857a305490575508a8b7a9fcf22/kubepods.slice";
    let first = "2ca4a155-3599-498d-bb9d-4446693fa3ea";
    let second = "ae7a96fb-2bdc-46b0-96e2-78e4af94847b";
    let crio_pod = |uid, id| pod(uid, QosClass::BestEffort, Some(id), Some(Runtime::Crio));
    let expected = vec![
        (node.to_owned(), None),
        (format!("{node}/kubepods-besteffort.slice"), None),
        (
            format!(
                "{node}/kubepods-besteffort.slice/kubepods-besteffort-pod2ca4a155_3599_498d_bb9d_4446693fa3ea.slice"
            ),
            pod(first, QosClass::BestEffort, None, None),
        ),
        (
            format!(
                "{node}/kubepods-besteffort.slice/kubepods-besteffort-pod2ca4a155_3599_498d_bb9d_4446693fa3ea.slice/crio-0ba8ac17e4e7a31fb82279503552fe94e64bab4745bf6fd2ff231e7c8ca8bed0.scope"
            ),
            crio_pod(first, "0ba8ac17e4e7a31fb82279503552fe94e64bab4745bf6fd2ff231e7c8ca8bed0"),
        ),
        (
            format!(
                "{node}/kubepods-besteffort.slice/kubepods-besteffort-pod2ca4a155_3599_498d_bb9d_4446693fa3ea.slice/crio-358607a37e7ada357032e7f5729c9ae6a3efdb7962acbcbe47ff6a3c5506cb1c.scope"
            ),
            crio_pod(first, "358607a37e7ada357032e7f5729c9ae6a3efdb7962acbcbe47ff6a3c5506cb1c"),
        ),
        (
            format!(
                "{node}/kubepods-besteffort.slice/kubepods-besteffort-podae7a96fb_2bdc_46b0_96e2_78e4af94847b.slice"
            ),
            pod(second, QosClass::BestEffort, None, None),
        ),
        (
            format!(
                "{node}/kubepods-besteffort.slice/kubepods-besteffort-podae7a96fb_2bdc_46b0_96e2_78e4af94847b.slice/crio-89e8f450417b56acf3089925dfd8f050dd50e950e18cfe83ea923269df601102.scope"
            ),
            crio_pod(second, "89e8f450417b56acf3089925dfd8f050dd50e950e18cfe83ea923269df601102"),
        ),
    ];
    let got: Vec<(String, Option<PodCgroup>)> =
        paths.into_iter().map(|p| (p.clone(), cgroup::parse(p.as_bytes()))).collect();
    assert_eq!(got, expected);
}

#[test]
fn every_category_4_file_has_a_cgroup_test() {
    let tested = BTreeSet::from([
        "cat4_cgroup_v2_kind_nested_kubelet_slice_nri_log.log",
        "cat4_cgroupfs_v2_kubepods_besteffort_pod_gvisor_event.txt",
        "cat4_mountinfo_cgroupfs_v1_root_kubepods_besteffort_pod_container.mountinfo",
        "cat4_proc_pid_cgroup_v1_systemd_crio_scope.cgroup",
        "cat4_proc_self_cgroup_legacy_BestEffort_slice_driver_mismatch.cgroup",
        "cat4_proc_self_cgroup_name_systemd_containerd_service.cgroup",
        "cat4_proc_self_cgroup_v1_systemd_docker_timestamp_prefixed.txt",
        "cat4_systemctl_status_kubepods_slice_crio_scopes_in_docker.txt",
    ]);
    let files = data_files("cat4_");
    assert_eq!(files.iter().map(String::as_str).collect::<BTreeSet<_>>(), tested);
    // And no line of any of them makes the parser panic, raw or as a whole file.
    for file in &files {
        let bytes = read(file);
        let _ = cgroup::parse_proc_file(&bytes);
        for line in bytes.split(|&b| b == b'\n') {
            let _ = cgroup::parse(line);
        }
    }
}

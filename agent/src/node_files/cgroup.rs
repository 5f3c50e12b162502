//! Pod and container identity from a process's cgroup, for events that carry only a PID or
//! a cgroup: kubelet names every pod cgroup after the pod's UID and the runtime names every
//! container cgroup after the container ID, so both can be read back from the path without
//! asking the API server or the runtime.
//!
//! Recognised (K8S `pkg/kubelet/cm/`, runc's systemd unit naming, containerd and CRI-O):
//! - systemd driver: `…/kubepods[-<qos>]-pod<uid with _>.slice[/<prefix>-<id>.scope]`, with
//!   any prefix before `kubepods` (kind's `kubelet-kubepods-…`) and the pre-1.6 QoS names
//!   (`BestEffort-pod<uid>.slice`, `Burstable-pod<uid>.slice`);
//! - the `<pod slice>:<prefix>:<id>` form containerd passes to runc, seen literally as a
//!   path when containerd's and kubelet's cgroup drivers disagree;
//! - cgroupfs driver: `…/kubepods[/<qos>]/pod<uid>[/<id>]`, and the same read from inside
//!   a cgroup namespace rooted below `kubepods` (the agent's, unprivileged, on a cgroup v2
//!   node): `/../../[<qos>/]pod<uid>[/<id>]`.
//!
//! Anything before the pod level (`/sys/fs/cgroup`, a node container's `/docker/<id>`,
//! `/system.slice/docker.service`) is ignored, so paths from inside nested or containerised
//! nodes work too.

/// A pod's QoS class, as kubelet places its cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QosClass {
    /// Directly under `kubepods` (no QoS level).
    Guaranteed,
    Burstable,
    BestEffort,
    /// Not in the path: it was read from inside a cgroup namespace (an unprivileged
    /// container's, the agent's own with the chart) whose root lies below `kubepods`, so
    /// the levels above the pod read as `..`.
    Unknown,
}

/// The container runtime that named a container cgroup, when the name says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Runtime {
    /// `cri-containerd-<id>.scope` or `:cri-containerd:<id>`.
    Containerd,
    /// `crio-<id>.scope` or `crio-<id>`.
    Crio,
    /// `docker-<id>.scope` (dockershim with the systemd driver).
    Docker,
}

/// The pod (and, when the path goes that deep, the container) a cgroup belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodCgroup {
    /// The pod UID with dashes, as in the API (`_` from the systemd form turned back to `-`).
    pub pod_uid: String,
    pub qos: QosClass,
    /// The container ID: 64 lowercase hex. `None` for the pod's own cgroup, for CRI-O's
    /// `crio-conmon-<id>.scope`, and for anything below the pod that is not a container.
    pub container_id: Option<String>,
    /// `None` when the name does not say (cgroupfs driver: a bare ID for containerd and
    /// docker alike).
    pub runtime: Option<Runtime>,
}

/// Container scope/directory prefixes and the runtime each names.
const RUNTIME_PREFIXES: [(&[u8], Runtime); 3] =
    [(b"cri-containerd-", Runtime::Containerd), (b"crio-", Runtime::Crio), (b"docker-", Runtime::Docker)];

/// Parses one line of `/proc/<pid>/cgroup` (`0::<path>` on v2, `N:<controllers>:<path>` on
/// v1) or a bare cgroup path, absolute or relative. `None` when it is not a pod's cgroup.
/// A trailing newline is ignored. Never panics.
pub fn parse(line: &[u8]) -> Option<PodCgroup> {
    parse_path(path_of_line(trim_eol(line)))
}

/// Parses a whole `/proc/<pid>/cgroup` file: the v2 line (`0::`) if it names a pod, else the
/// first v1 line that does. On hybrid hosts the v2 line can be `/` while v1 lines are exact.
pub fn parse_proc_file(content: &[u8]) -> Option<PodCgroup> {
    let lines = content.split(|&b| b == b'\n');
    let unified = lines.clone().find(|l| l.starts_with(b"0::")).and_then(parse);
    unified.or_else(|| lines.filter_map(parse).next())
}

/// Whether the kernel's cgroup ID of the process whose `/proc/<pid>/cgroup` this is (its
/// unified hierarchy's cgroup) tells its pod: the unified line names the pod, or there is
/// no v1 hierarchy that could place a pod elsewhere.
pub fn id_tells_pod(content: &[u8]) -> bool {
    let mut lines = content.split(|&b| b == b'\n').filter(|l| !l.is_empty());
    let unified_names_pod = lines.clone().find(|l| l.starts_with(b"0::")).and_then(parse).is_some();
    unified_names_pod || lines.all(|l| l.starts_with(b"0::"))
}

/// Parses a bare cgroup path. When several pod levels appear (a node running inside a
/// pod), the innermost wins: that is the pod the process most directly belongs to, and the
/// one its own node's kubelet knows.
pub fn parse_path(path: &[u8]) -> Option<PodCgroup> {
    let names: Vec<&[u8]> = path.split(|&b| b == b'/').filter(|n| !n.is_empty()).collect();
    (0..names.len()).rev().find_map(|i| pod_at(&names[..i], names[i], names.get(i + 1).copied()))
}

/// The path field of a `/proc/<pid>/cgroup` line, or the whole input when it is not one
/// (the hierarchy ID must be decimal; the path itself may hold more colons).
fn path_of_line(line: &[u8]) -> &[u8] {
    let mut fields = line.splitn(3, |&b| b == b':');
    match (fields.next(), fields.next(), fields.next()) {
        (Some(id), Some(_controllers), Some(path)) if !id.is_empty() && id.iter().all(u8::is_ascii_digit) => path,
        _ => line,
    }
}

fn trim_eol(line: &[u8]) -> &[u8] {
    let end = line.iter().rposition(|&b| b != b'\n' && b != b'\r').map_or(0, |i| i + 1);
    &line[..end]
}

/// The pod whose cgroup is `name`, given the names above it and the one below it.
fn pod_at(parents: &[&[u8]], name: &[u8], child: Option<&[u8]>) -> Option<PodCgroup> {
    if let Some(pod) = runc_systemd_triple(name) {
        return Some(pod);
    }
    let (pod_uid, qos) = systemd_pod_slice(name).or_else(|| cgroupfs_pod_dir(parents, name))?;
    let (container_id, runtime) = child.map_or((None, None), container_of);
    Some(PodCgroup { pod_uid, qos, container_id, runtime })
}

/// `<pod slice>:<prefix>:<id>`: containerd's runc `cgroupsPath` for the systemd driver.
fn runc_systemd_triple(name: &[u8]) -> Option<PodCgroup> {
    let mut parts = name.splitn(3, |&b| b == b':');
    let (slice, prefix, id) = (parts.next()?, parts.next()?, parts.next()?);
    let (pod_uid, qos) = systemd_pod_slice(slice)?;
    let runtime = RUNTIME_PREFIXES.iter().find(|(p, _)| p.strip_suffix(b"-") == Some(prefix)).map(|&(_, r)| r);
    let container_id = container_id(id);
    let runtime = container_id.as_ref().and(runtime);
    Some(PodCgroup { pod_uid, qos, container_id, runtime })
}

/// `[<prefix>-]kubepods[-<qos>]-pod<uid_>.slice`, or pre-1.6 `<QoS>-pod<uid_>.slice`.
/// systemd's slice names encode the whole hierarchy, so the name alone is enough.
fn systemd_pod_slice(name: &[u8]) -> Option<(String, QosClass)> {
    let stem = name.strip_suffix(b".slice")?;
    let parts: Vec<&[u8]> = stem.split(|&b| b == b'-').collect();
    let (pod, above) = parts.split_last()?;
    let uid = pod_uid(pod.strip_prefix(b"pod")?, b'_')?;
    let qos = match above.iter().position(|p| *p == b"kubepods") {
        Some(i) => qos_level(&above[i + 1..])?,
        None => legacy_qos(above)?,
    };
    Some((uid, qos))
}

/// `kubepods/pod<uid>` or `kubepods/<qos>/pod<uid>`; from inside a cgroup namespace
/// rooted at another pod's container, `../../pod<uid>` or `../../../<qos>/pod<uid>`.
fn cgroupfs_pod_dir(parents: &[&[u8]], name: &[u8]) -> Option<(String, QosClass)> {
    let uid = pod_uid(name.strip_prefix(b"pod")?, b'-')?;
    if let Some(kubepods) = parents.iter().rposition(|p| *p == b"kubepods") {
        return Some((uid, qos_level(&parents[kubepods + 1..])?));
    }
    let above_namespace = parents.iter().rposition(|p| *p == b"..")?;
    match &parents[above_namespace + 1..] {
        [] => Some((uid, QosClass::Unknown)),
        levels => Some((uid, qos_level(levels)?)),
    }
}

/// The QoS from the levels between `kubepods` and the pod: none, or exactly one.
fn qos_level(levels: &[&[u8]]) -> Option<QosClass> {
    match levels {
        [] => Some(QosClass::Guaranteed),
        [b"burstable"] => Some(QosClass::Burstable),
        [b"besteffort"] => Some(QosClass::BestEffort),
        _ => None,
    }
}

/// Kubernetes < 1.6 named QoS slices `BestEffort` and `Burstable`, with no `kubepods` above.
fn legacy_qos(levels: &[&[u8]]) -> Option<QosClass> {
    match levels {
        [b"Burstable"] => Some(QosClass::Burstable),
        [b"BestEffort"] => Some(QosClass::BestEffort),
        _ => None,
    }
}

/// A pod UID from its cgroup spelling: hex digits and dashes (UUIDs, and the 32-hex md5 UIDs
/// of static pods), with the systemd form's `_` turned back into `-`.
fn pod_uid(raw: &[u8], dash: u8) -> Option<String> {
    let valid = !raw.is_empty() && raw.iter().all(|&b| b == dash || b.is_ascii_hexdigit());
    let uid: String = raw.iter().map(|&b| if b == dash { '-' } else { char::from(b) }).collect();
    valid.then_some(uid)
}

/// The container named by the cgroup just below a pod: `<prefix>-<id>.scope` (systemd),
/// `crio-<id>` or a bare `<id>` (cgroupfs). Anything else (a file such as `cgroup.procs`,
/// `crio-conmon-<id>.scope`) names no container.
fn container_of(name: &[u8]) -> (Option<String>, Option<Runtime>) {
    let (stem, scope) = match name.strip_suffix(b".scope") {
        Some(stem) => (stem, true),
        None => (name, false),
    };
    let prefixed = RUNTIME_PREFIXES.iter().find_map(|&(p, r)| Some((stem.strip_prefix(p)?, r)));
    match prefixed {
        Some((id, runtime)) => container_id(id).map_or((None, None), |id| (Some(id), Some(runtime))),
        None if !scope => (container_id(stem), None),
        None => (None, None),
    }
}

/// CRI runtimes name containers with 64 lowercase hex characters.
fn container_id(raw: &[u8]) -> Option<String> {
    let valid = raw.len() == 64 && raw.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    valid.then(|| raw.iter().map(|&b| char::from(b)).collect())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const UID: &str = "a5c1f8d5-1919-434d-add7-4afaafdaef89";
    const UID_: &str = "a5c1f8d5_1919_434d_add7_4afaafdaef89";
    const ID: &str = "5eed917563583925ffdbd40a64efb2aaffe58638e57add8becaf460fe74f5b1c";

    fn p(s: &str) -> Option<PodCgroup> {
        parse(s.as_bytes())
    }

    fn pod(qos: QosClass, container: Option<&str>, runtime: Option<Runtime>) -> Option<PodCgroup> {
        Some(PodCgroup { pod_uid: UID.to_owned(), qos, container_id: container.map(str::to_owned), runtime })
    }

    #[test]
    fn systemd_v2_line_each_runtime() {
        for (prefix, runtime) in
            [("cri-containerd", Runtime::Containerd), ("crio", Runtime::Crio), ("docker", Runtime::Docker)]
        {
            let line = format!(
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/{prefix}-{ID}.scope\n"
            );
            assert_eq!(p(&line), pod(QosClass::Burstable, Some(ID), Some(runtime)), "{line}");
        }
    }

    #[test]
    fn systemd_qos_classes_and_pod_level() {
        let best = format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice");
        assert_eq!(p(&best), pod(QosClass::BestEffort, None, None));
        let guaranteed = format!("/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{ID}.scope");
        assert_eq!(p(&guaranteed), pod(QosClass::Guaranteed, Some(ID), Some(Runtime::Containerd)));
    }

    #[test]
    fn systemd_v1_line_with_controllers() {
        let line = format!("4:cpu,cpuacct:/kubepods.slice/kubepods-pod{UID_}.slice/crio-{ID}.scope");
        assert_eq!(p(&line), pod(QosClass::Guaranteed, Some(ID), Some(Runtime::Crio)));
        let named = format!("1:name=systemd:/kubepods.slice/kubepods-pod{UID_}.slice/crio-{ID}.scope");
        assert_eq!(p(&named), pod(QosClass::Guaranteed, Some(ID), Some(Runtime::Crio)));
    }

    #[test]
    fn kind_nested_kubelet_slice() {
        let path = format!(
            "/sys/fs/cgroup/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/\
             kubelet-kubepods-besteffort-pod{UID_}.slice/cri-containerd-{ID}.scope"
        );
        assert_eq!(p(&path), pod(QosClass::BestEffort, Some(ID), Some(Runtime::Containerd)));
    }

    #[test]
    fn runc_colon_form_relative_and_under_a_service() {
        let relative = format!("kubepods-burstable-pod{UID_}.slice:cri-containerd:{ID}");
        assert_eq!(p(&relative), pod(QosClass::Burstable, Some(ID), Some(Runtime::Containerd)));
        let mismatch = format!("1:name=systemd:/system.slice/containerd.service/{relative}");
        assert_eq!(p(&mismatch), pod(QosClass::Burstable, Some(ID), Some(Runtime::Containerd)));
        let bad_id = format!("kubepods-burstable-pod{UID_}.slice:cri-containerd:xyz");
        assert_eq!(p(&bad_id), pod(QosClass::Burstable, None, None));
    }

    #[test]
    fn cgroupfs_driver_seen_from_inside_a_cgroup_namespace() {
        // The agent's own namespace is rooted at its container's cgroup: a pod of the same
        // QoS class reads as two levels up, another class as three.
        assert_eq!(p(&format!("0::/../../pod{UID}/{ID}\n")), pod(QosClass::Unknown, Some(ID), None));
        assert_eq!(p(&format!("0::/../../../burstable/pod{UID}/{ID}")), pod(QosClass::Burstable, Some(ID), None));
        assert_eq!(p(&format!("0::/../pod{UID}")), pod(QosClass::Unknown, None, None));
        assert_eq!(p(&format!("0::/pod{UID}/{ID}")), None, "no kubepods and no namespace above: not a pod's");
        assert_eq!(p(&format!("0::/../../../other/pod{UID}/{ID}")), None);
    }

    #[test]
    fn cgroupfs_driver() {
        assert_eq!(p(&format!("0::/kubepods/burstable/pod{UID}/{ID}")), pod(QosClass::Burstable, Some(ID), None));
        assert_eq!(p(&format!("/kubepods/pod{UID}/{ID}")), pod(QosClass::Guaranteed, Some(ID), None));
        assert_eq!(p(&format!("/kubepods/besteffort/pod{UID}")), pod(QosClass::BestEffort, None, None));
        assert_eq!(
            p(&format!("/kubepods/besteffort/pod{UID}/crio-{ID}")),
            pod(QosClass::BestEffort, Some(ID), Some(Runtime::Crio))
        );
        // A file in the pod's cgroup is not a container.
        assert_eq!(
            p(&format!("/sys/fs/cgroup/kubepods/besteffort/pod{UID}/cgroup.procs")),
            pod(QosClass::BestEffort, None, None)
        );
    }

    #[test]
    fn static_pod_uid_without_dashes() {
        let uid = "0bb1ea5a6a45d5eee0ea4c7a1a2a2bfb";
        let got = p(&format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice")).unwrap();
        assert_eq!(got.pod_uid, uid);
    }

    #[test]
    fn legacy_qos_names() {
        let path = format!("/system.slice/docker.service/BestEffort.slice/BestEffort-pod{UID_}.slice/{ID}");
        assert_eq!(p(&path), pod(QosClass::BestEffort, Some(ID), None));
    }

    #[test]
    fn conmon_and_deeper_levels() {
        let base = format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice");
        assert_eq!(p(&format!("{base}/crio-conmon-{ID}.scope")), pod(QosClass::Burstable, None, None));
        // crun's `container` sub-cgroup below the scope does not hide the container.
        assert_eq!(
            p(&format!("{base}/crio-{ID}.scope/container")),
            pod(QosClass::Burstable, Some(ID), Some(Runtime::Crio))
        );
        // A `.scope` with a bare or unknown-prefixed id is not a container name.
        assert_eq!(p(&format!("{base}/{ID}.scope")), pod(QosClass::Burstable, None, None));
        assert_eq!(p(&format!("{base}/runc-{ID}.scope")), pod(QosClass::Burstable, None, None));
    }

    #[test]
    fn innermost_pod_wins() {
        let outer = "11111111-2222-3333-4444-555555555555";
        let path = format!("/kubepods/burstable/pod{outer}/{ID}/kubepods/pod{UID}");
        assert_eq!(p(&path), pod(QosClass::Guaranteed, None, None));
    }

    #[test]
    fn not_pod_cgroups() {
        for line in [
            "0::/",
            "0::/init.scope",
            "0::/system.slice/containerd.service",
            "12:rdma:/",
            "11:files:/",
            "0::/docker/c13e336caf8769432d95e971c6c1ce9b48438ec1e451d336590273091862db77",
            "0::/kubepods.slice",
            "0::/kubepods.slice/kubepods-burstable.slice",
            "0::/kubepods/burstable",
            // Wrong or missing QoS and UID shapes.
            "0::/kubepods.slice/kubepods-guaranteed-pod1234.slice",
            "0::/kubepods.slice/kubepods-burstable-extra-pod1234.slice",
            "0::/kubepods.slice/kubepods-burstable-pod.slice",
            "0::/kubepods.slice/kubepods-burstable-podxyz.slice",
            "0::/kubepods/burstable/pod12_34",
            "0::/kubepods/guaranteed/pod1234",
            "0::/other/burstable/pod1234",
            "0::/user.slice/user-1000.slice/pod1234.slice",
            "0::/Burstable-extra-pod1234.slice",
            "",
            ":::",
            "0:",
            "x::/kubepods/pod",
        ] {
            assert_eq!(p(line), None, "{line:?}");
        }
    }

    #[test]
    fn proc_file_prefers_the_unified_line() {
        let file =
            format!("12:rdma:/\n11:freezer:/kubepods/besteffort/pod{UID}/{ID}\n0::/kubepods/burstable/pod{UID}/{ID}\n");
        assert_eq!(parse_proc_file(file.as_bytes()), pod(QosClass::Burstable, Some(ID), None));
        let v1_only = format!("12:rdma:/\n11:freezer:/kubepods/besteffort/pod{UID}/{ID}\n0::/\n");
        assert_eq!(parse_proc_file(v1_only.as_bytes()), pod(QosClass::BestEffort, Some(ID), None));
        assert_eq!(parse_proc_file(b"0::/init.scope\n"), None);
        assert_eq!(parse_proc_file(b""), None);
    }

    #[test]
    fn crlf_and_non_utf8() {
        assert_eq!(p(&format!("0::/kubepods/pod{UID}/{ID}\r\n")), pod(QosClass::Guaranteed, Some(ID), None));
        let mut line = b"0::/\xff\xfe/kubepods/pod".to_vec();
        line.extend_from_slice(UID.as_bytes());
        assert_eq!(parse(&line), pod(QosClass::Guaranteed, None, None));
        assert_eq!(parse(b"0::/kubepods/pod\xff"), None);
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse(&bytes);
            let _ = parse_proc_file(&bytes);
        }

        #[test]
        fn never_panics_on_cgroup_like_lines(
            names in proptest::collection::vec(
                prop_oneof![
                    Just("kubepods".to_owned()),
                    Just("kubepods.slice".to_owned()),
                    Just("burstable".to_owned()),
                    Just("kubepods-burstable-pod.slice".to_owned()),
                    Just(format!("kubepods-besteffort-pod{UID_}.slice")),
                    Just(format!("pod{UID}")),
                    Just(format!("crio-{ID}.scope")),
                    Just(ID.to_owned()),
                    "[-_:.a-z0-9]{0,20}",
                ],
                0..8,
            ),
        ) {
            let line = format!("0::/{}", names.join("/"));
            if let Some(found) = parse(line.as_bytes()) {
                prop_assert!(!found.pod_uid.is_empty() && !found.pod_uid.contains('_'));
            }
        }
    }
}

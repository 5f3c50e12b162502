//! The pure parsers against real-world samples copied verbatim from public issues, docs and
//! upstream test data (`tests/fixtures/real-world/`, provenance in each `.source` and in
//! `INDEX.md`). Each expectation below was read off the fixture itself; lines that are not
//! kubelet or runtime paths must come out as `Other`, and odd lines must not panic.

use std::{
    collections::{BTreeMap, BTreeSet},
    ffi::OsStr,
    fs,
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
};

use volguard::{
    node_files::cgroup::{self, PodCgroup, QosClass, Runtime},
    node_files::kubelet::{ContainerdRuntime, PathKind, classify},
    node_files::mount_table::{MountTable, unescape},
    node_files::vol_data::{self, VolDataError},
};

const DEFAULT_ROOT: &str = "/var/lib/kubelet";
const MICROK8S_ROOT: &str = "/var/snap/microk8s/common/var/lib/kubelet";

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/real-world")
}

fn read(name: &str) -> Vec<u8> {
    let path = fixture_dir().join(name);
    fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn read_text(name: &str) -> String {
    String::from_utf8(read(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Data files (not `.source`, not INDEX.md) whose name starts with `prefix`.
fn data_files(prefix: &str) -> BTreeSet<String> {
    fs::read_dir(fixture_dir())
        .expect("fixture directory")
        .map(|e| e.expect("dir entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix) && !n.ends_with(".source"))
        .collect()
}

fn classify_bytes(root: &str, path: &[u8]) -> PathKind {
    classify(Path::new(root), Path::new(OsStr::from_bytes(path)))
}

// ---- extracting paths --------------------------------------------------------------------

/// One mountinfo line's root (field 4), mount point (field 5) and filesystem type (the
/// first field after the ` - ` separator), unescaped.
struct MountinfoLine {
    root: Vec<u8>,
    mount_point: Vec<u8>,
    fstype: Vec<u8>,
}

fn parse_mountinfo_line(line: &[u8]) -> Option<MountinfoLine> {
    let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    let dash = fields.iter().position(|f| *f == b"-")?;
    Some(MountinfoLine {
        root: unescape(fields.get(3)?),
        mount_point: unescape(fields.get(4)?),
        fstype: fields.get(dash + 1)?.to_vec(),
    })
}

/// `mount(8)` output: `<source> on <mount point> type <fstype> (<options>)`. Mount points
/// are not escaped there, so the text between the first ` on ` and the last ` type ` is
/// taken (the vSphere sample has spaces and brackets in it).
fn mount_output_target(line: &str) -> Option<&str> {
    let start = line.find(" on ")? + " on ".len();
    let end = line.rfind(" type ")?;
    line.get(start..end)
}

/// Every mount point in a mount-table fixture, by its extension.
fn mount_points(name: &str) -> Vec<Vec<u8>> {
    let bytes = read(name);
    let lines = bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty());
    if name.ends_with(".mountinfo") {
        // The agent's own parser (procfs, line by line) must read every real line...
        let table = MountTable::parse(&bytes);
        assert_eq!(table.skipped, vec![], "{name}: MountTable skipped lines");
        let points: Vec<Vec<u8>> = table.mounts.iter().map(|m| m.mount_point.as_os_str().as_bytes().to_vec()).collect();
        // ...and agree with a plain field split.
        let split: Vec<Vec<u8>> =
            lines.map(|l| parse_mountinfo_line(l).unwrap_or_else(|| panic!("{name}: bad line")).mount_point).collect();
        assert_eq!(points, split, "{name}");
        points
    } else if name.ends_with(".mount.txt") {
        lines
            .map(|l| {
                let line = std::str::from_utf8(l).unwrap_or_else(|e| panic!("{name}: {e}"));
                mount_output_target(line)
                    .unwrap_or_else(|| panic!("{name}: no mount point in {line}"))
                    .as_bytes()
                    .to_vec()
            })
            .collect()
    } else {
        panic!("{name} is not a mount table")
    }
}

/// Absolute paths quoted in free text (log lines, events, shell output): a `/` at the start
/// or after a delimiter, up to the next delimiter, without trailing `:`/`.` punctuation.
/// Good enough for these samples, whose paths hold no spaces or quotes.
fn paths_in_text(text: &str) -> Vec<String> {
    let is_delim = |c: char| c.is_whitespace() || "\"'[]()=”".contains(c);
    let mut paths = Vec::new();
    let mut prev = ' ';
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c == '/' && is_delim(prev) {
            let end = text[i..].find(is_delim).map_or(text.len(), |n| i + n);
            paths.push(text[i..end].trim_end_matches([':', '.']).to_owned());
            while chars.peek().is_some_and(|&(j, _)| j < end) {
                chars.next();
            }
            prev = text[..end].chars().next_back().unwrap_or(' ');
        } else {
            prev = c;
        }
    }
    paths
}

// ---- expected kinds ----------------------------------------------------------------------

fn publish(pod_uid: &str, volume: &str) -> PathKind {
    PathKind::CsiPublish { pod_uid: pod_uid.into(), volume: volume.into() }
}

fn legacy(pv_name: &str) -> PathKind {
    PathKind::CsiStagingLegacy { pv_name: pv_name.into() }
}

fn staging(driver: &str, handle_sha256: &str) -> PathKind {
    PathKind::CsiStaging { driver: driver.into(), handle_sha256: handle_sha256.into() }
}

fn subpath(pod_uid: &str, volume: &str, container: &str, index: u32) -> PathKind {
    PathKind::SubPath { pod_uid: pod_uid.into(), volume: volume.into(), container: container.into(), index }
}

fn containerd_v1(container_id: &str) -> PathKind {
    PathKind::ContainerdRootfs {
        runtime: ContainerdRuntime::V1Linux,
        container_id: container_id.into(),
        inner: PathBuf::new(),
    }
}

fn crio(layer_id: &str) -> PathKind {
    PathKind::CrioRootfs { layer_id: layer_id.into(), inner: PathBuf::new() }
}

/// One fixture: the kubelet root of the host it came from, and the kind of every path in it
/// that is not `Other`, keyed by the path as it appears (after unescaping).
struct Expect {
    file: &'static str,
    root: &'static str,
    kinds: Vec<(String, PathKind)>,
}

fn expect(file: &'static str, root: &'static str, kinds: Vec<(&str, PathKind)>) -> Expect {
    Expect { file, root, kinds: kinds.into_iter().map(|(p, k)| (p.to_owned(), k)).collect() }
}

/// Classifies every extracted path; listed paths must have their kind and be present,
/// all others must be `Other`.
fn check(e: &Expect, paths: &[Vec<u8>]) {
    let expected: BTreeMap<&[u8], &PathKind> = e.kinds.iter().map(|(p, k)| (p.as_bytes(), k)).collect();
    for path in paths {
        let got = classify_bytes(e.root, path);
        let want = expected.get(path.as_slice()).copied().unwrap_or(&PathKind::Other);
        assert_eq!(&got, want, "{}: {}", e.file, String::from_utf8_lossy(path));
    }
    for (path, _) in &e.kinds {
        assert!(paths.iter().any(|p| p == path.as_bytes()), "{}: expected path not found: {path}", e.file);
    }
}

fn mount_table_expectations() -> Vec<Expect> {
    let vsphere_pv = "csi.vsphere.vmware.com-[WorkloadDatastore] 5137595f-7ce3-e95a-5c03-06d835dea807/e2e-vmdk-1641379409741383902.vmdk";
    let vsphere_pod_volume = "csi.vsphere.vmware.com-[WorkloadDatastore] 5137595f-7ce3-e95a-5c03-06d835dea807~e2e-vmdk-1641379409741383902.vmdk";
    vec![
        expect(
            "cat1_mount_azuredisk_pv_globalmount_docs.mount.txt",
            DEFAULT_ROOT,
            vec![
                (
                    "/var/lib/kubelet/plugins/kubernetes.io/csi/pv/pvc-e4c14592-2a79-423e-846f-4b25fe393d6c/globalmount",
                    legacy("pvc-e4c14592-2a79-423e-846f-4b25fe393d6c"),
                ),
                (
                    "/var/lib/kubelet/pods/75351f5a-b2ce-4fab-bb90-250aaa010298/volumes/kubernetes.io~csi/pvc-e4c14592-2a79-423e-846f-4b25fe393d6c/mount",
                    publish("75351f5a-b2ce-4fab-bb90-250aaa010298", "pvc-e4c14592-2a79-423e-846f-4b25fe393d6c"),
                ),
            ],
        ),
        expect(
            "cat1_mount_cephfs_kernel_pv_globalmount_and_pod.mount.txt",
            DEFAULT_ROOT,
            vec![
                (
                    "/var/lib/kubelet/plugins/kubernetes.io/csi/pv/pvc-48bd5014-1193-4f9b-990c-b745849b92a0/globalmount",
                    legacy("pvc-48bd5014-1193-4f9b-990c-b745849b92a0"),
                ),
                (
                    "/var/lib/kubelet/pods/59100c04-9d64-4426-a184-c5858fc9504e/volumes/kubernetes.io~csi/pvc-48bd5014-1193-4f9b-990c-b745849b92a0/mount",
                    publish("59100c04-9d64-4426-a184-c5858fc9504e", "pvc-48bd5014-1193-4f9b-990c-b745849b92a0"),
                ),
            ],
        ),
        expect(
            "cat1_mount_cinder_xfs_seclabel_pv_globalmount.mount.txt",
            DEFAULT_ROOT,
            vec![
                (
                    "/var/lib/kubelet/plugins/kubernetes.io/csi/pv/pvc-fc52b5a4-77bc-11e9-8554-fa163e0629eb/globalmount",
                    legacy("pvc-fc52b5a4-77bc-11e9-8554-fa163e0629eb"),
                ),
                (
                    "/var/lib/kubelet/pods/0cc35038-77bf-11e9-8554-fa163e0629eb/volumes/kubernetes.io~csi/pvc-fc52b5a4-77bc-11e9-8554-fa163e0629eb/mount",
                    publish("0cc35038-77bf-11e9-8554-fa163e0629eb", "pvc-fc52b5a4-77bc-11e9-8554-fa163e0629eb"),
                ),
            ],
        ),
        // Markdown autolinking turned `k8s.io/<id>/rootfs` into `[k8s.io/…](http://k8s.io/…)`:
        // the namespace component is `[k8s.io`, so this is not a rootfs.
        expect("cat1_mount_containerd_rootfs_markdown_autolinked_CORRUPTED.mount.txt", DEFAULT_ROOT, vec![]),
        expect(
            "cat1_mount_crio_overlay_merged_metacopy.mount.txt",
            DEFAULT_ROOT,
            vec![
                (
                    "/var/lib/containers/storage/overlay/4af3b2c4da8f8dc560426ec4f8234c301cad087a8a4b3ae9cfe7eee538f6c62c/merged",
                    crio("4af3b2c4da8f8dc560426ec4f8234c301cad087a8a4b3ae9cfe7eee538f6c62c"),
                ),
                (
                    "/var/lib/containers/storage/overlay/0af51c41d4a598ccefc989c202378b063917aa55812066e194ff330f9a999640/merged",
                    crio("0af51c41d4a598ccefc989c202378b063917aa55812066e194ff330f9a999640"),
                ),
            ],
        ),
        expect(
            "cat1_mount_csi_baremetal_xfs_loop_partition.mount.txt",
            DEFAULT_ROOT,
            vec![
                (
                    "/var/lib/kubelet/plugins/kubernetes.io/csi/pv/pvc-d6801174-a56a-4d16-a5d3-a4cf62d96085/globalmount",
                    legacy("pvc-d6801174-a56a-4d16-a5d3-a4cf62d96085"),
                ),
                (
                    "/var/lib/kubelet/pods/4065bf56-1971-4356-a78c-73889ea25f0d/volumes/kubernetes.io~csi/pvc-d6801174-a56a-4d16-a5d3-a4cf62d96085/mount",
                    publish("4065bf56-1971-4356-a78c-73889ea25f0d", "pvc-d6801174-a56a-4d16-a5d3-a4cf62d96085"),
                ),
            ],
        ),
        expect(
            "cat1_mount_linstor_drbd_pod_mount_no_staging.mount.txt",
            DEFAULT_ROOT,
            vec![(
                "/var/lib/kubelet/pods/9c4ab752-d7d8-4eac-abdc-b27486b147b7/volumes/kubernetes.io~csi/pvc-3d1a3ebb-7a61-4307-b253-1ec13d5c473e/mount",
                publish("9c4ab752-d7d8-4eac-abdc-b27486b147b7", "pvc-3d1a3ebb-7a61-4307-b253-1ec13d5c473e"),
            )],
        ),
        // Inside Longhorn's share-manager pod: `/export/<pv>` is not a kubelet path.
        expect("cat1_mount_longhorn_share_manager_export.mount.txt", DEFAULT_ROOT, vec![]),
        // The prompt is glued to the output; the mount point is still between ` on ` and ` type `.
        expect(
            "cat1_mount_secrets_store_inline_tmpfs_glued_prompt.mount.txt",
            DEFAULT_ROOT,
            vec![(
                "/var/lib/kubelet/pods/f826640c-b1d5-473b-b157-14936a330925/volumes/kubernetes.io~csi/secrets-store-inline/mount",
                publish("f826640c-b1d5-473b-b157-14936a330925", "secrets-store-inline"),
            )],
        ),
        expect(
            "cat1_mount_vsphere_migrated_volume_spaces_brackets.mount.txt",
            DEFAULT_ROOT,
            vec![
                (
                    &format!("/var/lib/kubelet/plugins/kubernetes.io/csi/pv/{vsphere_pv}/globalmount"),
                    legacy(vsphere_pv),
                ),
                (
                    &format!(
                        "/var/lib/kubelet/pods/00541d84-1c59-4788-bb9b-e97ae5a6ecbe/volumes/kubernetes.io~csi/{vsphere_pod_volume}/mount"
                    ),
                    publish("00541d84-1c59-4788-bb9b-e97ae5a6ecbe", vsphere_pod_volume),
                ),
            ],
        ),
        expect(
            "cat1_mountinfo_k3s_in_docker_containerd_v1_linux_rootfs.mountinfo",
            DEFAULT_ROOT,
            vec![
                (
                    "/run/k3s/containerd/io.containerd.runtime.v1.linux/k8s.io/0b14fd09a2d4d54042919c5cdc9767f4d18afc50b3a90383043fa898e3483daa/rootfs",
                    containerd_v1("0b14fd09a2d4d54042919c5cdc9767f4d18afc50b3a90383043fa898e3483daa"),
                ),
                (
                    "/run/k3s/containerd/io.containerd.runtime.v1.linux/k8s.io/3e43634c8867f78afa5d78c91b8cb9f957ca96b61ed04d356f96d88e577f10ee/rootfs",
                    containerd_v1("3e43634c8867f78afa5d78c91b8cb9f957ca96b61ed04d356f96d88e577f10ee"),
                ),
            ],
        ),
        // Seen from inside a container: no mount point is a kubelet path (the kubelet path
        // is in the root column; see `kubelet_path_in_the_root_column_is_not_a_mount_point`).
        expect("cat1_mountinfo_pod_container_view_docker_termination_log.mountinfo", DEFAULT_ROOT, vec![]),
        // In-tree plugins only: gce-pd and nfs pod volumes are not CSI (Other), but kubelet's
        // subPath binds are the same for every plugin.
        expect(
            "cat1_mountinfo_upstream_mount-utils_testdata_gce-pd_subpath_nfs_iscsi.mountinfo",
            DEFAULT_ROOT,
            vec![
                (
                    "/var/lib/kubelet/pods/c25464af-e52e-11e7-ab4d-42010a800002/volume-subpaths/vol1/subpath1/0",
                    subpath("c25464af-e52e-11e7-ab4d-42010a800002", "vol1", "subpath1", 0),
                ),
                (
                    "/var/lib/kubelet/pods/c25464af-e52e-11e7-ab4d-42010a800002/volume-subpaths/vol1/subpath1/1",
                    subpath("c25464af-e52e-11e7-ab4d-42010a800002", "vol1", "subpath1", 1),
                ),
                (
                    "/var/lib/kubelet/pods/d4076f24-e53a-11e7-ba15-42010a800002/volume-subpaths/vol1/subpath1/0",
                    subpath("d4076f24-e53a-11e7-ba15-42010a800002", "vol1", "subpath1", 0),
                ),
                (
                    "/var/lib/kubelet/pods/d4076f24-e53a-11e7-ba15-42010a800002/volume-subpaths/vol1/subpath1/1",
                    subpath("d4076f24-e53a-11e7-ba15-42010a800002", "vol1", "subpath1", 1),
                ),
                (
                    "/var/lib/kubelet/pods/12345/volume-subpaths/vol1/subpath1/0",
                    subpath("12345", "vol1", "subpath1", 0),
                ),
                (
                    "/var/lib/kubelet/pods/41135147-e697-11e7-9342-42010a800002/volume-subpaths/vol1/subpath1/0",
                    subpath("41135147-e697-11e7-9342-42010a800002", "vol1", "subpath1", 0),
                ),
                ("/var/lib/kubelet/pods/2345/volume-subpaths/vol1/subpath1/0", subpath("2345", "vol1", "subpath1", 0)),
                (
                    "/var/lib/kubelet/pods/43219158-e5e1-11e7-a392-0e858b8eaf40/volume-subpaths/nfs1/subpath1/0",
                    subpath("43219158-e5e1-11e7-a392-0e858b8eaf40", "nfs1", "subpath1", 0),
                ),
            ],
        ),
        // A pod's own view: only `/`, /proc, /dev, /sys and cgroup mounts.
        expect("cat4_mountinfo_cgroupfs_v1_root_kubepods_besteffort_pod_container.mountinfo", DEFAULT_ROOT, vec![]),
    ]
}

#[test]
fn every_mount_table_fixture_is_classified_as_expected() {
    let expectations = mount_table_expectations();
    let covered: BTreeSet<String> = expectations.iter().map(|e| e.file.to_owned()).collect();
    let tables: BTreeSet<String> =
        data_files("").into_iter().filter(|n| n.ends_with(".mountinfo") || n.ends_with(".mount.txt")).collect();
    assert_eq!(covered, tables, "every mount-table fixture needs expectations");
    for e in &expectations {
        let paths = mount_points(e.file);
        assert!(!paths.is_empty(), "{}: no mount points extracted", e.file);
        check(e, &paths);
    }
}

#[test]
fn vsphere_staging_and_pod_names_differ_only_by_kubelet_escaping() {
    let paths = mount_points("cat1_mount_vsphere_migrated_volume_spaces_brackets.mount.txt");
    let kinds: Vec<PathKind> = paths.iter().map(|p| classify_bytes(DEFAULT_ROOT, p)).collect();
    let [PathKind::CsiStagingLegacy { pv_name }, PathKind::CsiPublish { volume, .. }] = kinds.as_slice() else {
        panic!("unexpected kinds {kinds:?}");
    };
    assert_eq!(&pv_name.replace('/', "~"), volume);
}

#[test]
fn glued_prompt_line_still_yields_the_publish_target() {
    let text = read_text("cat1_mount_secrets_store_inline_tmpfs_glued_prompt.mount.txt");
    // What sits where the device should be is the shell prompt and the grep command.
    assert!(text.starts_with("root@kind-control-plane:~# mount | grep secrets-store-inlinetmpfs on /var/lib/kubelet/"));
    assert!(matches!(classify_bytes(DEFAULT_ROOT, mount_points_first(&text)), PathKind::CsiPublish { .. }));
}

fn mount_points_first(text: &str) -> &[u8] {
    mount_output_target(text.lines().next().unwrap_or_default()).unwrap_or_default().as_bytes()
}

#[test]
fn corrupted_containerd_paste_and_longhorn_export_are_other() {
    let corrupted = mount_points("cat1_mount_containerd_rootfs_markdown_autolinked_CORRUPTED.mount.txt");
    assert_eq!(corrupted.len(), 1);
    assert!(corrupted[0].starts_with(b"/run/containerd/io.containerd.runtime.v2.task/[k8s.io/"));
    let longhorn = mount_points("cat1_mount_longhorn_share_manager_export.mount.txt");
    assert_eq!(longhorn, vec![b"/export/pvc-8d1d3f46-76b6-484e-9a3a-93cc821ffd5b".to_vec()]);
    // Against every kubelet root seen in these fixtures, even `/`: still Other.
    for root in [DEFAULT_ROOT, MICROK8S_ROOT, "/data/k8s/kubelet", "/"] {
        for path in corrupted.iter().chain(&longhorn) {
            assert_eq!(classify_bytes(root, path), PathKind::Other, "{root}: {}", String::from_utf8_lossy(path));
        }
    }
}

#[test]
fn kubelet_path_in_the_root_column_is_not_a_mount_point() {
    let bytes = read("cat1_mountinfo_pod_container_view_docker_termination_log.mountinfo");
    let line = bytes
        .split(|&b| b == b'\n')
        .filter_map(parse_mountinfo_line)
        .find(|l| l.mount_point == b"/dev/termination-log")
        .expect("termination-log line");
    assert_eq!(line.root, b"/var/lib/kubelet/pods/ee9951df-fb87-4568-98f1-bde2c62fbad6/containers/po/8a03d371");
    // `<root>/pods/<uid>/containers/…` is kubelet's, but none of the classified kinds.
    assert_eq!(classify_bytes(DEFAULT_ROOT, &line.root), PathKind::Other);
}

#[test]
fn mountinfo_octal_escapes_before_digits() {
    // INDEX.md mentions a vSphere mountinfo with `\040` right before digits; that file is
    // not in the set, so the vSphere `mount` line's staging path is escaped the way the
    // kernel would write it and parsed back.
    let text = read_text("cat1_mount_vsphere_migrated_volume_spaces_brackets.mount.txt");
    let staging = mount_output_target(text.lines().next().unwrap_or_default()).expect("staging line");
    let escaped = staging.replace('\\', "\\134").replace(' ', "\\040");
    assert!(escaped.contains("]\\0405137595f"));
    let line = format!("3000 29 8:64 / {escaped} rw,relatime shared:1 - ext4 /dev/sde rw,seclabel");
    let parsed = parse_mountinfo_line(line.as_bytes()).expect("line");
    assert_eq!(parsed.mount_point, staging.as_bytes());
    assert!(matches!(classify_bytes(DEFAULT_ROOT, &parsed.mount_point), PathKind::CsiStagingLegacy { .. }));
    // Unterminated or non-octal escapes are kept literally.
    assert_eq!(unescape(b"a\\04"), b"a\\04");
    assert_eq!(unescape(b"a\\089b"), b"a\\089b");
    assert_eq!(unescape(b"\\134\\011x"), b"\\\tx");
}

// ---- category 3: paths quoted in logs and events -----------------------------------------

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

// ---- category 2: vol_data.json -----------------------------------------------------------

#[test]
fn vol_data_fixtures() {
    let files = data_files("cat2_");
    let expected: BTreeMap<&str, VolDataError> = BTreeMap::from([
        ("cat2_vol_data_json_EMPTY_0_bytes.json", VolDataError::Empty { len: 0 }),
        // Neither text file is JSON (they are shell output about vol_data.json files):
        // both fail at their first byte, with a position the caller can log.
        (
            "cat2_vol_data_json_empty_issue_excerpt.txt",
            VolDataError::Malformed { line: 1, column: 1, reason: "expected value".into() },
        ),
        (
            "cat2_vol_data_json_ls_pod_dir_vs_staging_dir.txt",
            VolDataError::Malformed { line: 1, column: 1, reason: "expected value".into() },
        ),
    ]);
    assert_eq!(files.iter().map(String::as_str).collect::<BTreeSet<_>>(), expected.keys().copied().collect());
    for (file, err) in &expected {
        let bytes = read(file);
        assert_eq!(vol_data::parse(&bytes).as_ref(), Err(err), "{file}");
    }
    assert!(read("cat2_vol_data_json_EMPTY_0_bytes.json").is_empty());
}

// ---- category 4: cgroups -----------------------------------------------------------------

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

#[test]
fn every_fixture_line_through_every_parser_without_panicking() {
    for file in data_files("cat") {
        let bytes = read(&file);
        let _ = vol_data::parse(&bytes);
        let _ = cgroup::parse_proc_file(&bytes);
        for line in bytes.split(|&b| b == b'\n') {
            let _ = cgroup::parse(line);
            let _ = classify_bytes(DEFAULT_ROOT, line);
            if let Some(l) = parse_mountinfo_line(line) {
                let _ = classify_bytes(DEFAULT_ROOT, &l.mount_point);
                let _ = classify_bytes(DEFAULT_ROOT, &l.root);
            }
        }
    }
}

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

mod cgroups;
mod texts;

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

// Long by design: one row per real-world sample, read as a table.
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

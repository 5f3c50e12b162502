//! Tests of the parent module, kept apart so that it stays readable.

use super::*;

mod publish_targets {
    use super::*;

    const ROOT: &str = "/var/lib/kubelet";

    fn classify(path: &str) -> Option<PublishTarget> {
        publish_target(Path::new(ROOT), Path::new(path))
    }

    #[test]
    fn filesystem_and_block_publish_targets() {
        let fs = classify("/var/lib/kubelet/pods/6a1f/volumes/kubernetes.io~csi/pvc-42/mount").unwrap();
        assert_eq!(fs, PublishTarget { pod_uid: "6a1f".into(), volume: "pvc-42".into(), block: false });
        let block = classify("/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pvc-7/6a1f").unwrap();
        assert_eq!(block, PublishTarget { pod_uid: "6a1f".into(), volume: "pvc-7".into(), block: true });
    }

    #[test]
    fn everything_else_is_not_a_publish_target() {
        for path in [
            "/var/lib/kubelet/pods/6a1f/volumes/kubernetes.io~csi/pvc-42",
            "/var/lib/kubelet/pods/6a1f/volumes/kubernetes.io~csi/pvc-42/mount/sub",
            "/var/lib/kubelet/pods/6a1f/volumes/kubernetes.io~empty-dir/cache/mount",
            "/var/lib/kubelet/pods/6a1f/volume-subpaths/pvc-42/app/0",
            "/var/lib/kubelet/plugins/kubernetes.io/csi/pd.csi.storage.gke.io/0123/globalmount",
            "/var/lib/kubelet/pods/../pods/6a1f/volumes/kubernetes.io~csi/pvc-42/mount",
            "/other/root/pods/6a1f/volumes/kubernetes.io~csi/pvc-42/mount",
            "pods/6a1f/volumes/kubernetes.io~csi/pvc-42/mount",
            "/proc/thread-self/fd/7",
            "",
        ] {
            assert_eq!(classify(path), None, "{path}");
        }
    }

    #[test]
    fn dot_components_and_trailing_slashes_name_the_same_target() {
        let plain = classify("/var/lib/kubelet/pods/6a1f/volumes/kubernetes.io~csi/pvc-42/mount");
        assert!(plain.is_some());
        assert_eq!(classify("/var/lib/kubelet/pods/./6a1f/volumes/kubernetes.io~csi/pvc-42/mount/"), plain);
    }

    #[test]
    fn a_custom_kubelet_root_and_odd_but_valid_names() {
        let root = Path::new("/data/k8s/kubelet");
        let path = Path::new("/data/k8s/kubelet/pods/uid with space/volumes/kubernetes.io~csi/pv:a/mount");
        let t = publish_target(root, path).unwrap();
        assert_eq!((t.pod_uid.as_str(), t.volume.as_str()), ("uid with space", "pv:a"));
    }
}

mod every_form {
    use std::{ffi::OsStr, os::unix::ffi::OsStrExt};

    use proptest::prelude::*;

    use super::*;

    const ROOT: &str = "/var/lib/kubelet";
    const HASH: &str = "6eede1929b708423990deaef8efd0ddc79452b5dd7012f2b551c5ca5772e71d5";
    const CTR: &str = "7d0849b82c486573d1648409c675bf3f67113db630639075ed25ad73a122b2bb";

    fn kind(path: &str) -> PathKind {
        classify(Path::new(ROOT), Path::new(path))
    }

    fn kind_bytes(path: &[u8]) -> PathKind {
        classify(Path::new(ROOT), Path::new(OsStr::from_bytes(path)))
    }

    fn s(v: &str) -> String {
        v.to_owned()
    }

    #[test]
    fn publish_targets_filesystem_and_block() {
        assert_eq!(
            kind("/var/lib/kubelet/pods/6a1f/volumes/kubernetes.io~csi/pvc-42/mount"),
            PathKind::CsiPublish { pod_uid: s("6a1f"), volume: s("pvc-42") }
        );
        assert_eq!(
            kind("/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pvc-7/6a1f"),
            PathKind::CsiBlockPublish { volume: s("pvc-7"), pod_uid: s("6a1f") }
        );
    }

    #[test]
    fn staging_hashed_form() {
        let path = format!("/var/lib/kubelet/plugins/kubernetes.io/csi/smb.csi.k8s.io/{HASH}/globalmount");
        assert_eq!(kind(&path), PathKind::CsiStaging { driver: s("smb.csi.k8s.io"), handle_sha256: s(HASH) });
    }

    #[test]
    fn staging_hashed_form_needs_64_lowercase_hex() {
        let upper = HASH.to_uppercase();
        for hash in [&HASH[..63], &format!("{HASH}0"), upper.as_str(), &format!("{}g", &HASH[..63])] {
            let path = format!("/var/lib/kubelet/plugins/kubernetes.io/csi/smb.csi.k8s.io/{hash}/globalmount");
            assert_eq!(kind(&path), PathKind::Other, "{path}");
        }
        // `volumeDevices` is kubelet's raw-block directory, never a driver.
        let path = format!("/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/{HASH}/globalmount");
        assert_eq!(kind(&path), PathKind::Other);
    }

    #[test]
    fn staging_legacy_form_keeps_colons_slashes_spaces_and_brackets() {
        for (path, pv) in [
            ("/var/lib/kubelet/plugins/kubernetes.io/csi/pv/pvc-1/globalmount", "pvc-1"),
            (
                "/var/lib/kubelet/plugins/kubernetes.io/csi/pv/ebs.csi.aws.com-aws:/us-west-2a/vol-0a49/globalmount",
                "ebs.csi.aws.com-aws:/us-west-2a/vol-0a49",
            ),
            (
                "/var/lib/kubelet/plugins/kubernetes.io/csi/pv/csi.vsphere.vmware.com-[DS] 5137/e2e.vmdk/globalmount",
                "csi.vsphere.vmware.com-[DS] 5137/e2e.vmdk",
            ),
            // A PV literally containing a `globalmount` level: everything up to the last one.
            ("/var/lib/kubelet/plugins/kubernetes.io/csi/pv/a/globalmount/b/globalmount", "a/globalmount/b"),
            // Legacy wins over a driver named `pv` with a hash-like PV name.
            (&format!("/var/lib/kubelet/plugins/kubernetes.io/csi/pv/{HASH}/globalmount"), HASH),
        ] {
            assert_eq!(kind(path), PathKind::CsiStagingLegacy { pv_name: s(pv) }, "{path}");
        }
        assert_eq!(kind("/var/lib/kubelet/plugins/kubernetes.io/csi/pv/globalmount"), PathKind::Other);
        assert_eq!(kind("/var/lib/kubelet/plugins/kubernetes.io/csi/pv/pvc-1/vol_data.json"), PathKind::Other);
        assert_eq!(kind("/var/lib/kubelet/plugins/kubernetes.io/csi/pv/pvc-1"), PathKind::Other);
    }

    #[test]
    fn raw_block_staging_global_map_and_pod_device_map() {
        assert_eq!(
            kind("/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/staging/pvc-7"),
            PathKind::CsiBlockStaging { volume: s("pvc-7") }
        );
        assert_eq!(
            kind("/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/pvc-7/dev/6a1f"),
            PathKind::CsiBlockGlobalMap { volume: s("pvc-7"), pod_uid: s("6a1f") }
        );
        assert_eq!(
            kind("/var/lib/kubelet/pods/6a1f/volumeDevices/kubernetes.io~csi/pvc-7"),
            PathKind::CsiPodDeviceMap { pod_uid: s("6a1f"), volume: s("pvc-7") }
        );
        // A PV named `staging` has its global map at `volumeDevices/staging/dev/<pod>`.
        assert_eq!(
            kind("/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/staging/dev/6a1f"),
            PathKind::CsiBlockGlobalMap { volume: s("staging"), pod_uid: s("6a1f") }
        );
        // Ambiguous in kubelet's own layout; the publish reading wins, as in the kernel.
        assert_eq!(
            kind("/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/dev/6a1f"),
            PathKind::CsiBlockPublish { volume: s("dev"), pod_uid: s("6a1f") }
        );
    }

    #[test]
    fn raw_block_near_misses() {
        for path in [
            "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/pvc-7/data/vol_data.json",
            "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/pvc-7/dev",
            "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pvc-7",
            "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/staging",
            "/var/lib/kubelet/pods/6a1f/volumeDevices/kubernetes.io~csi",
            "/var/lib/kubelet/pods/6a1f/volumeDevices/kubernetes.io~csi/pvc-7/x",
            "/var/lib/kubelet/pods/6a1f/volumeDevices/kubernetes.io~local-volume/pvc-7",
        ] {
            assert_eq!(kind(path), PathKind::Other, "{path}");
        }
    }

    #[test]
    fn subpath_targets() {
        assert_eq!(
            kind("/var/lib/kubelet/pods/6a1f/volume-subpaths/pvc-42/app/0"),
            PathKind::SubPath { pod_uid: s("6a1f"), volume: s("pvc-42"), container: s("app"), index: 0 }
        );
        assert_eq!(
            kind("/var/lib/kubelet/pods/6a1f/volume-subpaths/vol1/subpath1/17"),
            PathKind::SubPath { pod_uid: s("6a1f"), volume: s("vol1"), container: s("subpath1"), index: 17 }
        );
        for path in [
            "/var/lib/kubelet/pods/6a1f/volume-subpaths/pvc-42/app/01",
            "/var/lib/kubelet/pods/6a1f/volume-subpaths/pvc-42/app/+1",
            "/var/lib/kubelet/pods/6a1f/volume-subpaths/pvc-42/app/-1",
            "/var/lib/kubelet/pods/6a1f/volume-subpaths/pvc-42/app/x",
            "/var/lib/kubelet/pods/6a1f/volume-subpaths/pvc-42/app/4294967296",
            "/var/lib/kubelet/pods/6a1f/volume-subpaths/pvc-42/app",
            "/var/lib/kubelet/pods/6a1f/volume-subpaths/pvc-42/app/0/deeper",
        ] {
            assert_eq!(kind(path), PathKind::Other, "{path}");
        }
    }

    #[test]
    fn containerd_rootfs_v2_v1_and_k3s() {
        let v2 = format!("/run/containerd/io.containerd.runtime.v2.task/k8s.io/{CTR}/rootfs");
        assert_eq!(
            kind(&v2),
            PathKind::ContainerdRootfs {
                runtime: ContainerdRuntime::V2Task,
                container_id: s(CTR),
                inner: PathBuf::new()
            }
        );
        let bind = format!("{v2}/var/lib/www");
        assert_eq!(
            kind(&bind),
            PathKind::ContainerdRootfs {
                runtime: ContainerdRuntime::V2Task,
                container_id: s(CTR),
                inner: PathBuf::from("var/lib/www"),
            }
        );
        for state in ["/run/containerd", "/run/k3s/containerd", "/var/snap/microk8s/common/run/containerd"] {
            let v1 = format!("{state}/io.containerd.runtime.v1.linux/k8s.io/{CTR}/rootfs/");
            assert_eq!(
                kind(&v1),
                PathKind::ContainerdRootfs {
                    runtime: ContainerdRuntime::V1Linux,
                    container_id: s(CTR),
                    inner: PathBuf::new(),
                },
                "{v1}"
            );
        }
    }

    #[test]
    fn containerd_near_misses() {
        for path in [
            format!("/run/containerd/io.containerd.runtime.v2.task/moby/{CTR}/rootfs"),
            format!("/run/containerd/io.containerd.runtime.v2.task/[k8s.io/{CTR}/rootfs](http:/k8s.io/{CTR}/rootfs)"),
            format!("/run/containerd/io.containerd.runtime.v2.task/k8s.io/{CTR}"),
            format!("/run/containerd/io.containerd.runtime.v2.task/k8s.io/{CTR}/config.json"),
            format!("/run/containerd/io.containerd.runtime.v3.task/k8s.io/{CTR}/rootfs"),
            format!("/srv/containerd/io.containerd.runtime.v2.task/k8s.io/{CTR}/rootfs"),
            format!("/run/containerd/io.containerd.runtime.v2.task/k8s.io/{CTR}/rootfs/../../../etc"),
        ] {
            assert_eq!(kind(&path), PathKind::Other, "{path}");
        }
    }

    #[test]
    fn crio_merged_rootfs() {
        let merged = format!("/var/lib/containers/storage/overlay/{CTR}/merged");
        assert_eq!(kind(&merged), PathKind::CrioRootfs { layer_id: s(CTR), inner: PathBuf::new() });
        assert_eq!(
            kind(&format!("{merged}/etc/hosts")),
            PathKind::CrioRootfs { layer_id: s(CTR), inner: PathBuf::from("etc/hosts") }
        );
        for path in [
            format!("/var/lib/containers/storage/overlay/{CTR}/diff"),
            format!("/var/lib/containers/storage/overlay/{CTR}"),
            "/var/lib/containers/storage/overlay/l/77QFPDFA2COPZJC2MZEUFYUQHI".to_owned(),
            format!("/var/lib/containers/storage/overlay-containers/{CTR}/userdata/shm"),
        ] {
            assert_eq!(kind(&path), PathKind::Other, "{path}");
        }
    }

    #[test]
    fn runtime_paths_are_independent_of_the_kubelet_root() {
        let root = Path::new("/data/k8s/kubelet");
        let path = format!("/run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io/{CTR}/rootfs");
        assert!(matches!(classify(root, Path::new(&path)), PathKind::ContainerdRootfs { .. }));
    }

    #[test]
    fn custom_roots_and_paths_outside_them() {
        let snap = Path::new("/var/snap/microk8s/common/var/lib/kubelet");
        let path =
            Path::new("/var/snap/microk8s/common/var/lib/kubelet/plugins/kubernetes.io/csi/pv/pvc-3f/globalmount");
        assert_eq!(classify(snap, path), PathKind::CsiStagingLegacy { pv_name: s("pvc-3f") });
        // The same path against the default root is not a kubelet path at all.
        assert_eq!(classify(Path::new(ROOT), path), PathKind::Other);
        // A trailing slash on the configured root changes nothing.
        assert_eq!(classify(Path::new("/var/snap/microk8s/common/var/lib/kubelet/"), path), classify(snap, path));
    }

    #[test]
    fn odd_bytes_in_names() {
        // Spaces, brackets, tildes and colons are ordinary name bytes.
        assert_eq!(
            kind(
                "/var/lib/kubelet/pods/0054/volumes/kubernetes.io~csi/csi.vsphere.vmware.com-[DS] 5137~e2e.vmdk/mount"
            ),
            PathKind::CsiPublish { pod_uid: s("0054"), volume: s("csi.vsphere.vmware.com-[DS] 5137~e2e.vmdk") }
        );
        // Non-UTF-8 where a kubelet name is expected: not something kubelet wrote.
        assert_eq!(kind_bytes(b"/var/lib/kubelet/pods/\xff/volumes/kubernetes.io~csi/pvc-42/mount"), PathKind::Other);
        // Non-UTF-8 inside a container rootfs is the container's business, kept as bytes.
        let mut path = format!("/run/containerd/io.containerd.runtime.v2.task/k8s.io/{CTR}/rootfs/").into_bytes();
        path.extend_from_slice(b"d\xffir");
        assert_eq!(
            kind_bytes(&path),
            PathKind::ContainerdRootfs {
                runtime: ContainerdRuntime::V2Task,
                container_id: s(CTR),
                inner: PathBuf::from(OsStr::from_bytes(b"d\xffir")),
            }
        );
    }

    #[test]
    fn dot_dot_relative_and_empty_paths_are_other() {
        for path in [
            "/var/lib/kubelet/pods/6a1f/volumes/kubernetes.io~csi/pvc-42/../pvc-42/mount",
            "/var/lib/kubelet/../kubelet/plugins/kubernetes.io/csi/pv/pvc-1/globalmount",
            "/var/lib/containers/storage/overlay/x/merged/..",
            "var/lib/kubelet/pods/6a1f/volume-subpaths/v/c/0",
            "./var/lib/kubelet/pods/6a1f/volume-subpaths/v/c/0",
            "",
            "/",
            "/var/lib/kubelet",
            "/var/lib/kubelet/pods",
        ] {
            assert_eq!(kind(path), PathKind::Other, "{path:?}");
        }
        // An empty kubelet root would make every absolute path "under" it: nothing matches.
        let path = Path::new("/pods/6a1f/volumes/kubernetes.io~csi/pvc-42/mount");
        assert_eq!(classify(Path::new(""), path), PathKind::Other);
    }

    #[test]
    fn publish_target_agrees_with_classify() {
        let fs = Path::new("/var/lib/kubelet/pods/6a1f/volumes/kubernetes.io~csi/pvc-42/mount");
        assert_eq!(
            publish_target(Path::new(ROOT), fs),
            Some(PublishTarget { pod_uid: s("6a1f"), volume: s("pvc-42"), block: false })
        );
        let staging = Path::new("/var/lib/kubelet/plugins/kubernetes.io/csi/pv/pvc-1/globalmount");
        assert_eq!(publish_target(Path::new(ROOT), staging), None);
    }

    /// Path-like byte strings built from kubelet and runtime names, so the generator reaches
    /// the deep match arms and not only the early rejections.
    fn pathish() -> impl Strategy<Value = Vec<u8>> {
        let atom = prop_oneof![
            Just(b"pods".to_vec()),
            Just(b"volumes".to_vec()),
            Just(b"kubernetes.io~csi".to_vec()),
            Just(b"kubernetes.io".to_vec()),
            Just(b"csi".to_vec()),
            Just(b"plugins".to_vec()),
            Just(b"volumeDevices".to_vec()),
            Just(b"publish".to_vec()),
            Just(b"staging".to_vec()),
            Just(b"dev".to_vec()),
            Just(b"pv".to_vec()),
            Just(b"globalmount".to_vec()),
            Just(b"mount".to_vec()),
            Just(b"volume-subpaths".to_vec()),
            Just(b"rootfs".to_vec()),
            Just(b"merged".to_vec()),
            Just(b"k8s.io".to_vec()),
            Just(b"io.containerd.runtime.v2.task".to_vec()),
            Just(b"..".to_vec()),
            Just(b".".to_vec()),
            Just(b"".to_vec()),
            Just(HASH.as_bytes().to_vec()),
            "[0-9]{1,12}".prop_map(String::into_bytes),
            proptest::collection::vec(any::<u8>(), 0..12),
        ];
        let prefix = prop_oneof![
            Just(b"/var/lib/kubelet".to_vec()),
            Just(b"/run/containerd".to_vec()),
            Just(b"/var/lib/containers/storage/overlay".to_vec()),
            Just(Vec::new()),
        ];
        (prefix, proptest::collection::vec(atom, 0..10)).prop_map(|(prefix, atoms)| {
            let mut path = prefix;
            for atom in atoms {
                path.push(b'/');
                path.extend_from_slice(&atom);
            }
            path
        })
    }

    proptest! {
        #[test]
        fn classify_never_panics_on_arbitrary_bytes(
            root in proptest::collection::vec(any::<u8>(), 0..32),
            path in proptest::collection::vec(any::<u8>(), 0..256),
        ) {
            let _ = classify(Path::new(OsStr::from_bytes(&root)), Path::new(OsStr::from_bytes(&path)));
            let _ = classify(Path::new(ROOT), Path::new(OsStr::from_bytes(&path)));
        }

        #[test]
        fn classify_never_panics_on_kubelet_like_paths(path in pathish()) {
            let kind = classify(Path::new(ROOT), Path::new(OsStr::from_bytes(&path)));
            // Whatever was recognised came from a path without `..`.
            if kind != PathKind::Other {
                prop_assert!(!path.windows(4).any(|w| w == b"/../") && !path.ends_with(b"/.."));
            }
        }
    }
}

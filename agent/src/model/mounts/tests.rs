use super::*;

const ROOT: &str = "/var/lib/kubelet";

fn line(id: i32, mount_point: &str) -> String {
    format!("{id} 30 8:1 /volumes/x {mount_point} rw,relatime shared:1 - ext4 /dev/sdb rw\n")
}

#[test]
fn publishes_come_oldest_first_and_only_from_publish_targets() {
    let text = [
        line(60, &publish_path("pod-b", "pv-rwop")),
        line(50, &publish_path("pod-a", "pv-rwop")),
        line(55, &publish_path("pod-a", "pv-rwop")), // the owner's second publish
        line(80, "/var/lib/kubelet/pods/pod-c/volumes/kubernetes.io~csi/pv-other/mount/sub"),
    ]
    .concat();
    let mounts = Mounts::from_table(&MountTable::parse(text.as_bytes()), Path::new(ROOT));
    let pods: Vec<_> = mounts.pods_of("pv-rwop").iter().map(|(p, m)| (p.to_string(), m.mount_id)).collect();
    assert_eq!(pods, [("pod-a".to_string(), Some(50)), ("pod-b".to_string(), Some(60))]);
    assert!(mounts.pods_of("pv-other").is_empty(), "a mount below a publish target is not a publish");
}

#[test]
fn escaped_spaces_in_a_publish_target_are_still_recognised() {
    let text = line(9, r"/var/lib/kubelet/pods/pod\040a/volumes/kubernetes.io~csi/pv-rwop/mount");
    let mounts = Mounts::from_table(&MountTable::parse(text.as_bytes()), Path::new(ROOT));
    assert_eq!(mounts.pods_of("pv-rwop")[0].0, "pod a");
}

fn publish_path(pod: &str, volume: &str) -> String {
    format!("{ROOT}/pods/{pod}/volumes/kubernetes.io~csi/{volume}/mount")
}

fn table(mounts: &[(i32, String)]) -> MountTable {
    let text: String = mounts
        .iter()
        .map(|(id, path)| format!("{id} 30 8:1 /x {path} rw,relatime shared:1 - ext4 /dev/sdb rw\n"))
        .collect();
    MountTable::parse(text.as_bytes())
}

fn target(pod: &str, volume: &str) -> PublishTarget {
    PublishTarget { pod_uid: pod.into(), volume: volume.into(), block: false }
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn owners(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(v, p)| (v.to_string(), p.to_string())).collect()
}

#[test]
fn the_mount_table_gives_publishes_oldest_first() {
    let t = table(&[
        (90, publish_path("pod-b", "pv-1")),
        (40, publish_path("pod-a", "pv-1")),
        (95, publish_path("pod-a", "pv-1")), // stacked: keeps 40
        (50, "/var/lib/kubelet/pods/pod-a/volumes/kubernetes.io~empty-dir/x".into()),
        (60, format!("{ROOT}/plugins/kubernetes.io/csi/volumeDevices/publish/pv-blk/pod-c")),
    ]);
    let m = Mounts::from_table(&t, Path::new(ROOT));
    let pods: Vec<_> = m.pods_of("pv-1").iter().map(|(p, m)| (p.to_string(), m.mount_id)).collect();
    assert_eq!(pods, [("pod-a".to_string(), Some(40)), ("pod-b".to_string(), Some(90))]);
    assert!(m.pods_of("pv-blk")[0].1.block);
    assert_eq!(m.volumes().collect::<Vec<_>>(), ["pv-1", "pv-blk"]);
}

#[test]
fn a_recorded_mount_table_gives_every_publish_and_nothing_else() {
    let text = include_bytes!("../../../tests/fixtures/recorded/kubelet-node.mountinfo");
    let table = MountTable::parse(text);
    assert_eq!(table.skipped, [], "every recorded line parses");
    let m = Mounts::from_table(&table, Path::new(ROOT));
    let (a, b) = ("7d1c0a52-1111-4a6e-9f00-0000000000a1", "7d1c0a52-2222-4a6e-9f00-0000000000b2");
    let pods = |v| m.pods_of(v).into_iter().map(|(p, _)| p.to_owned()).collect::<Vec<_>>();
    assert_eq!(pods("pvc-rwx"), [a, b]);
    assert_eq!(pods("pvc-rwop"), [a], "the subPath bind is not a second publish");
    assert_eq!(pods("pv odd"), [a], "the escaped space is decoded");
    assert_eq!(pods("pvc-blk"), [b]);
    assert!(m.pods_of("pvc-blk")[0].1.block);
    assert_eq!(m.volumes().count(), 4, "the staging mount is not a publish");
}

#[test]
fn a_target_whose_top_mount_is_the_mask_is_quarantined_not_published() {
    let mask = |id: i32, path: &str| format!("{id} 30 0:50 / {path} ro - tmpfs {MASK_SOURCE} ro\n");
    let bind = |id: i32, path: &str| format!("{id} 30 8:1 /x {path} rw - ext4 /dev/sdb rw\n");
    let (a, b, c) = (publish_path("pod-a", "pv-1"), publish_path("pod-b", "pv-1"), publish_path("pod-c", "pv-1"));
    // b: its bind, then the mask over it; c: a newer publish over an old mask.
    let text = [bind(40, &a), bind(41, &b), mask(42, &b), mask(43, &c), bind(44, &c)].concat();
    let m = Mounts::from_table(&MountTable::parse(text.as_bytes()), Path::new(ROOT));
    let holders: Vec<_> = m.pods_of("pv-1").into_iter().map(|(p, _)| p).collect();
    assert_eq!(holders, ["pod-a", "pod-c"], "the mask is not a publish and hides b's bind");
    assert_eq!(m.masked_pods("pv-1"), ["pod-b"]);
    assert!(m.is_masked("pv-1", "pod-b") && !m.is_masked("pv-1", "pod-c"));
}

#[test]
fn a_quarantine_turns_a_publish_into_a_mask_and_an_unpublish_takes_either() {
    let mut m = Mounts::default();
    let path = PathBuf::from(publish_path("b", "v"));
    m.apply(&PublishChange::Published(target("b", "v"), path.clone()));
    m.quarantined(&target("b", "v"), &path);
    assert_eq!((m.pods_of("v").len(), m.masked_pods("v")), (0, vec!["b"]));
    assert_eq!(m.volumes().collect::<Vec<_>>(), ["v"], "still listed, as quarantined");
    m.apply(&PublishChange::Unpublished(target("b", "v")));
    assert_eq!((m.masks().count(), m.volumes().count()), (0, 0));
    m.quarantined(&target("c", "v"), &path);
    m.unmasked("v", "c");
    assert_eq!(m.masks().count(), 0);
}

#[test]
fn a_mask_is_removed_only_after_its_pod_is_missing_from_complete_facts_twice() {
    let mut m = Mounts::default();
    m.quarantined(&target("b", "v"), Path::new("/t"));
    let mut r = MaskReconciler::default();
    let (with_b, without_b) = (BTreeSet::from(["a", "b"]), BTreeSet::from(["a"]));
    assert_eq!(r.plan(&m, Some(&with_b)), []);
    assert_eq!(r.plan(&m, Some(&without_b)), [], "missing once: perhaps a pod the watch has not caught up with");
    assert_eq!(r.plan(&m, None), [], "stale facts decide nothing and reset the count");
    assert_eq!(r.plan(&m, Some(&without_b)), []);
    let stale = r.plan(&m, Some(&without_b));
    assert_eq!(stale, [StaleMask { volume: "v".into(), pod_uid: "b".into(), mount_point: "/t".into() }]);
}

#[test]
fn a_deleted_pods_mask_is_removed_at_once() {
    let mut m = Mounts::default();
    m.quarantined(&target("b", "v"), Path::new("/t"));
    m.quarantined(&target("c", "v"), Path::new("/u"));
    let stale = masks_of_deleted(&m, &BTreeSet::from(["b"]));
    assert_eq!(stale, [StaleMask { volume: "v".into(), pod_uid: "b".into(), mount_point: "/t".into() }]);
    assert_eq!(masks_of_deleted(&m, &BTreeSet::new()), []);
}

/// The kernel gave the newcomer's mount a reused id lower than the owner's: the unique
/// ids, where they can all be read, decide; one unreadable id leaves the table's order.
#[test]
fn unique_mount_ids_order_a_shared_volume_where_reused_ids_would_not() {
    let (a, b) = (publish_path("pod-a", "pv-1"), publish_path("pod-b", "pv-1"));
    let text = [line(90, &a), line(40, &b), line(50, &publish_path("pod-c", "pv-alone"))].concat();
    let read = || Mounts::from_table(&MountTable::parse(text.as_bytes()), Path::new(ROOT));
    let order = |m: &Mounts| m.pods_of("pv-1").iter().map(|(p, _)| p.to_string()).collect::<Vec<_>>();
    assert_eq!(order(&read()), ["pod-b", "pod-a"], "by the table's reused ids");

    let mut asked = Vec::new();
    let mut mounts = read();
    mounts.learn_ages(|at| {
        asked.push(at.to_owned());
        Some(if at == Path::new(&a) { 0x8000_0010 } else { 0x8000_0020 })
    });
    assert_eq!(order(&mounts), ["pod-a", "pod-b"], "by age");
    assert_eq!(asked.len(), 2, "only a volume published into several pods is asked about: {asked:?}");

    let mut partly = read();
    partly.learn_ages(|at| (at == Path::new(&a)).then_some(0x8000_0010));
    assert_eq!(order(&partly), ["pod-b", "pod-a"], "all or none per volume");
    assert!(partly.pods_of("pv-1").iter().all(|(_, p)| p.unique_id.is_none()));
}

#[test]
fn events_add_and_remove_publishes() {
    let mut m = Mounts::default();
    m.apply(&PublishChange::Published(target("a", "v"), publish_path("a", "v").into()));
    m.apply(&PublishChange::Published(target("b", "v"), publish_path("b", "v").into()));
    assert!(m.is_published("v", "a") && m.is_published("v", "b"));
    m.apply(&PublishChange::Unpublished(target("a", "v")));
    assert!(!m.is_published("v", "a"));
    m.apply(&PublishChange::Unpublished(target("b", "v")));
    assert_eq!(m.volumes().count(), 0, "an unpublished volume leaves no empty entry");
    m.apply(&PublishChange::Unpublished(target("zz", "none")));
}

#[test]
fn drift_counts_publishes_the_events_missed() {
    let from_events = Mounts::from_table(&table(&[(1, publish_path("a", "v"))]), Path::new(ROOT));
    let from_table = Mounts::from_table(&table(&[(2, publish_path("b", "v"))]), Path::new(ROOT));
    assert_eq!(from_events.differences(&from_table), 2);
    assert_eq!(from_table.differences(&from_table.clone()), 0);
}

#[test]
fn the_publishes_new_since_a_view_include_one_on_top_of_a_mask_it_had() {
    let mut before = Mounts::default();
    before.apply(&PublishChange::Published(target("a", "v"), publish_path("a", "v").into()));
    before.apply(&PublishChange::Published(target("c", "v"), publish_path("c", "v").into()));
    before.quarantined(&target("c", "v"), Path::new(&publish_path("c", "v")));
    let fresh = Mounts::from_table(
        &table(&[(1, publish_path("a", "v")), (2, publish_path("b", "v")), (3, publish_path("c", "v"))]),
        Path::new(ROOT),
    );
    let found = fresh.publishes_new_since(&before);
    let published = |pod| PublishChange::Published(target(pod, "v"), publish_path(pod, "v").into());
    assert_eq!(found, [published("b"), published("c")], "a new publish, and a retry on top of the mask");
    assert!(fresh.publishes_new_since(&fresh).is_empty());
}

/// Publish, second publish, unmount, pod deletion and restart, as the reconciler sees
/// them pass by pass.
#[test]
fn an_owner_is_released_only_after_its_mount_is_gone_for_two_passes() {
    let root = Path::new(ROOT);
    let single = set(&["pv-1"]);
    let mut r = OwnerReconciler::default();

    // Pod A has it published; pod B's publish (quarantined or refused) is not an owner.
    let both = Mounts::from_table(&table(&[(10, publish_path("a", "pv-1")), (20, publish_path("b", "pv-1"))]), root);
    assert_eq!(r.plan(|v| single.contains(v), &both, &owners(&[("pv-1", "a")])), []);

    // A is terminating (or deleted from the API) but still mounted: nothing changes.
    let a_only = Mounts::from_table(&table(&[(10, publish_path("a", "pv-1"))]), root);
    assert_eq!(r.plan(|v| single.contains(v), &a_only, &owners(&[("pv-1", "a")])), []);

    // A's unmount event was lost: the first pass only notes it, the second releases.
    let none = Mounts::default();
    assert_eq!(r.plan(|v| single.contains(v), &none, &owners(&[("pv-1", "a")])), []);
    assert_eq!(
        r.plan(|v| single.contains(v), &none, &owners(&[("pv-1", "a")])),
        [OwnerFix::Release { volume: "pv-1".into(), pod_uid: "a".into() }]
    );
}

#[test]
fn a_claim_racing_the_mount_table_read_is_not_released() {
    let mut r = OwnerReconciler::default();
    let single = set(&["pv-1"]);
    let published = Mounts::from_table(&table(&[(10, publish_path("a", "pv-1"))]), Path::new(ROOT));
    // Pass 1 read the table before the mount landed; pass 2 sees it.
    assert_eq!(r.plan(|v| single.contains(v), &Mounts::default(), &owners(&[("pv-1", "a")])), []);
    assert_eq!(r.plan(|v| single.contains(v), &published, &owners(&[("pv-1", "a")])), []);
    assert_eq!(
        r.plan(|v| single.contains(v), &Mounts::default(), &owners(&[("pv-1", "a")])),
        [],
        "the count starts again"
    );
}

#[test]
fn published_single_pod_volumes_without_an_owner_are_seeded_with_the_oldest_publish() {
    let mut r = OwnerReconciler::default();
    let t = table(&[(30, publish_path("late", "pv-1")), (10, publish_path("early", "pv-1"))]);
    let m = Mounts::from_table(&t, Path::new(ROOT));
    assert_eq!(
        r.plan(|v| ["pv-1", "pv-unused"].contains(&v), &m, &BTreeMap::new()),
        [OwnerFix::Seed { volume: "pv-1".into(), pod_uid: "early".into() }]
    );
    assert_eq!(r.plan(|_| false, &m, &BTreeMap::new()), [], "not single-pod: no owner");
}

#[test]
fn views_join_facts_mounts_and_owners() {
    use crate::facts::{CsiSource, PersistentVolume};
    let facts = Facts {
        persistent_volumes: vec![PersistentVolume {
            name: "pv-1".into(),
            access_modes: vec![],
            csi: Some(CsiSource { driver: "d".into(), volume_handle: "h".into(), fs_type: None }),
            claim_ref: Some(ClaimRef { namespace: "ns".into(), name: "c".into() }),
            block: false,
        }],
        ..Facts::default()
    };
    let single =
        [("pv-1".to_owned(), SinglePodReason::ReadWriteOncePod), ("pv-idle".to_owned(), SinglePodReason::Annotated)]
            .into_iter()
            .collect();
    let m =
        Mounts::from_table(&table(&[(1, publish_path("a", "pv-1")), (2, publish_path("b", "rwx"))]), Path::new(ROOT));
    let views = volume_views(&facts, &single, &m, &owners(&[("pv-1", "a")]));
    let names: Vec<_> = views.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["pv-1", "pv-idle", "rwx"]);
    assert_eq!(views[0].owner.as_deref(), Some("a"));
    assert_eq!(views[0].driver.as_deref(), Some("d"));
    assert_eq!(views[0].claim.as_ref().unwrap().to_string(), "ns/c");
    assert_eq!(views[1].published_to, Vec::<String>::new());
    assert_eq!(views[2].single_pod, None);
}

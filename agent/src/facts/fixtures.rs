//! Builders of facts for the unit tests, one place for all of them: a PV, a pod, and the
//! small cluster the conflict tests share.

use super::{AccessMode, ClaimRef, CsiSource, Facts, PersistentVolume, Pod};

/// The CSI driver of [`pv`]'s volumes.
pub const DRIVER: &str = "d.example.com";

/// A filesystem CSI PV of [`DRIVER`] with handle `h-<name>`, bound to no claim.
pub fn pv(name: &str, modes: &[AccessMode]) -> PersistentVolume {
    PersistentVolume {
        name: name.into(),
        access_modes: modes.to_vec(),
        csi: Some(CsiSource { driver: DRIVER.into(), volume_handle: format!("h-{name}"), fs_type: None }),
        claim_ref: None,
        block: false,
    }
}

impl PersistentVolume {
    /// Bound to PVC `namespace/name`.
    pub fn bound_to(mut self, namespace: &str, name: &str) -> Self {
        self.claim_ref = Some(ClaimRef { namespace: namespace.into(), name: name.into() });
        self
    }

    /// Served by CSI driver `driver` (with `fs_type`, when given).
    pub fn on_driver(mut self, driver: &str, fs_type: Option<&str>) -> Self {
        let csi = self.csi.get_or_insert_with(|| CsiSource {
            driver: String::new(),
            volume_handle: String::new(),
            fs_type: None,
        });
        csi.driver = driver.into();
        csi.fs_type = fs_type.map(Into::into);
        self
    }
}

/// Pod `namespace/name` with UID `uid` and no volumes.
pub fn pod(namespace: &str, uid: &str, name: &str) -> Pod {
    Pod { uid: uid.into(), namespace: namespace.into(), name: name.into(), ..Pod::default() }
}

/// Two pods of namespace `shop` (`uid-a` db-0, `uid-b` db-1) and PV `pv-1` bound to
/// `shop/data`: the conflict tests' cluster.
pub fn sample_facts() -> Facts {
    let mut pv_1 = pv("pv-1", &[]).bound_to("shop", "data");
    pv_1.csi = None;
    Facts {
        pods: vec![pod("shop", "uid-a", "db-0"), pod("shop", "uid-b", "db-1")],
        persistent_volumes: vec![pv_1],
        ..Facts::default()
    }
}

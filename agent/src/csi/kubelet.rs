//! What this node's kubelet does with ReadWriteOncePod, by its version
//! (`status.nodeInfo.kubeletVersion`).
//!
//! - Its own check (`operation_generator.go`: "volume uses the ReadWriteOncePod access
//!   mode and is already in use by another pod") follows the ReadWriteOncePod feature
//!   gate: alpha and off by default in 1.22–1.26, beta and on in 1.27–1.28, GA (locked on)
//!   in 1.29–1.30, removed (always on) from 1.31. The gate is a kubelet flag we cannot
//!   see, so the defaults are what we judge by.
//! - The CSI access mode it sends does not follow the gate: `getNodeV1AccessModeMapper`
//!   (`csi_client.go`) picks the mapping from the driver's node capabilities alone in every
//!   version since 1.22. Before 1.22 the mapping has no ReadWriteOncePod case, so the
//!   driver is told UNKNOWN ([`super::rules::pre_rwop_kubelet_access_mode`]).

use serde::Serialize;

use crate::facts::Facts;

/// `major.minor` of a kubelet version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct KubeletVersion {
    pub major: u32,
    pub minor: u32,
}

impl KubeletVersion {
    /// Lenient: an optional `v`, then `major.minor`; whatever follows is ignored (`.4`,
    /// `-gke.100`, `+k3s1`, and pre-releases such as `-rc.0`, which count as their minor).
    /// `None` for anything else, and for major 0: a kubelet built without version
    /// information reports `v0.0.0-master+$Format`.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let text = text.strip_prefix(['v', 'V']).unwrap_or(text);
        let (major, rest) = text.split_once('.')?;
        let digits = |s: &str| -> Option<u32> {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
        };
        let minor_end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let version = Self { major: digits(major)?, minor: digits(&rest[..minor_end])? };
        (version.major > 0).then_some(version)
    }
}

/// How a kubelet treats ReadWriteOncePod, by its version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KubeletRwop {
    /// The version is not known or not a Kubernetes 1.x version.
    #[default]
    Unknown,
    /// Before 1.22: no ReadWriteOncePod at all.
    Unaware,
    /// 1.22–1.26: the feature gate is alpha, off by default.
    AlphaOffByDefault,
    /// 1.27–1.28: beta, on by default.
    BetaOnByDefault,
    /// 1.29–1.30: GA, the gate locked on.
    Ga,
    /// 1.31 on: the gate is gone, the check always runs.
    GateRemoved,
}

impl KubeletRwop {
    pub fn of(version: Option<KubeletVersion>) -> Self {
        match version.map(|v| (v.major, v.minor)) {
            Some((1, 0..=21)) => Self::Unaware,
            Some((1, 22..=26)) => Self::AlphaOffByDefault,
            Some((1, 27..=28)) => Self::BetaOnByDefault,
            Some((1, 29..=30)) => Self::Ga,
            Some((1, _)) => Self::GateRemoved,
            _ => Self::Unknown,
        }
    }

    /// The kubelet version the facts carry (the agent's own facts carry none).
    pub fn of_facts(facts: &Facts) -> Self {
        Self::of(facts.node.as_ref().and_then(|n| KubeletVersion::parse(&n.kubelet_version)))
    }

    /// Whether the kubelet refuses a second pod on a ReadWriteOncePod volume itself, with
    /// its feature gates at their defaults; `None` when the version is unknown.
    pub fn refuses_second_pod(self) -> Option<bool> {
        match self {
            Self::Unknown => None,
            Self::Unaware | Self::AlphaOffByDefault => Some(false),
            Self::BetaOnByDefault | Self::Ga | Self::GateRemoved => Some(true),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::Unknown => "cannot tell whether kubelet refuses a second pod on a ReadWriteOncePod volume itself",
            Self::Unaware => {
                "predates ReadWriteOncePod (1.22): kubelet does not refuse a second pod itself and sends \
                 ReadWriteOncePod volumes to the driver as UNKNOWN"
            }
            Self::AlphaOffByDefault => {
                "ReadWriteOncePod feature gate alpha, off by default (1.22-1.26): kubelet does not refuse a second \
                 pod itself unless the gate was turned on"
            }
            Self::BetaOnByDefault => {
                "ReadWriteOncePod feature gate beta, on by default (1.27-1.28): kubelet refuses a second pod itself \
                 unless the gate was turned off"
            }
            Self::Ga => "ReadWriteOncePod GA (1.29-1.30, gate locked on): kubelet refuses a second pod itself",
            Self::GateRemoved => {
                "ReadWriteOncePod always on (gate removed in 1.31): kubelet refuses a second pod itself"
            }
        }
    }
}

/// The node's kubelet, as `volguard check` reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KubeletReport {
    /// `status.nodeInfo.kubeletVersion` as the Node reports it; `None` when not known.
    pub version: Option<String>,
    pub rwop: KubeletRwop,
    /// One line for people: what the version means, or why it is not known.
    pub summary: String,
}

impl KubeletReport {
    pub fn from_facts(facts: &Facts) -> Self {
        let Some(node) = &facts.node else { return Self::not_known("the facts have no Node") };
        if node.kubelet_version.trim().is_empty() {
            return Self::not_known("the Node reports no kubeletVersion");
        }
        let rwop = KubeletRwop::of_facts(facts);
        let version = node.kubelet_version.clone();
        let summary = match rwop {
            KubeletRwop::Unknown => format!("kubelet version {version:?} not understood: {}", rwop.describe()),
            _ => format!("kubelet {version}: {}", rwop.describe()),
        };
        Self { version: Some(version), rwop, summary }
    }

    pub fn not_known(why: &str) -> Self {
        Self {
            version: None,
            rwop: KubeletRwop::Unknown,
            summary: format!("kubelet version not known ({why}): {}", KubeletRwop::Unknown.describe()),
        }
    }

    /// `v1.26.15`, or `of unknown version`, for messages.
    pub fn name(&self) -> String {
        self.version.as_deref().map_or_else(|| "of unknown version".into(), str::to_owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::NodeInfo;

    #[test]
    fn versions_parse_leniently() {
        let v = |major, minor| Some(KubeletVersion { major, minor });
        let rows = [
            ("v1.26.15", v(1, 26)),
            ("1.29", v(1, 29)),
            (" V1.31.0 ", v(1, 31)),
            ("v1.34.4-gke.100", v(1, 34)),
            ("v1.28.5+k3s1", v(1, 28)),
            ("v1.29.0-eks-5e0fdde", v(1, 29)),
            ("v1.27.0-rc.1", v(1, 27)),
            ("v1.22", v(1, 22)),
            ("v0.0.0-master+$Format", None),
            ("", None),
            ("v", None),
            ("v1", None),
            ("v1.", None),
            ("v1.x", None),
            ("v.26", None),
            ("v+1.26", None),
            ("vv1.26", None),
            ("1.99999999999999999999", None),
            ("unknown", None),
            ("v1.٢٦", None),
        ];
        for (text, expected) in rows {
            assert_eq!(KubeletVersion::parse(text), expected, "{text:?}");
        }
    }

    #[test]
    fn what_each_version_does_with_rwop() {
        use KubeletRwop::*;
        let rows = [
            ("v1.0.0", Unaware),
            ("v1.21.14", Unaware),
            ("v1.22.0", AlphaOffByDefault),
            ("v1.26.15", AlphaOffByDefault),
            ("v1.27.0", BetaOnByDefault),
            ("v1.28.9", BetaOnByDefault),
            ("v1.29.0", Ga),
            ("v1.30.4", Ga),
            ("v1.31.0", GateRemoved),
            ("v1.34.4-gke.100", GateRemoved),
            ("v2.0.0", Unknown),
            ("v0.0.0-master+$Format", Unknown),
            ("garbage", Unknown),
        ];
        for (text, expected) in rows {
            let rwop = KubeletRwop::of(KubeletVersion::parse(text));
            assert_eq!(rwop, expected, "{text}");
            let refuses = match expected {
                Unknown => None,
                Unaware | AlphaOffByDefault => Some(false),
                BetaOnByDefault | Ga | GateRemoved => Some(true),
            };
            assert_eq!(rwop.refuses_second_pod(), refuses, "{text}");
        }
    }

    fn facts(version: Option<&str>) -> Facts {
        Facts { node: version.map(|v| NodeInfo { kubelet_version: v.into() }), ..Facts::default() }
    }

    #[test]
    fn the_report_says_what_it_knows() {
        let old = KubeletReport::from_facts(&facts(Some("v1.26.15")));
        assert_eq!(old.version.as_deref(), Some("v1.26.15"));
        assert_eq!(old.rwop, KubeletRwop::AlphaOffByDefault);
        assert!(old.summary.starts_with("kubelet v1.26.15: ReadWriteOncePod feature gate alpha"), "{}", old.summary);
        let odd = KubeletReport::from_facts(&facts(Some("v0.0.0-master+$Format")));
        assert_eq!((odd.version.as_deref(), odd.rwop), (Some("v0.0.0-master+$Format"), KubeletRwop::Unknown));
        assert!(odd.summary.contains("not understood"), "{}", odd.summary);
        let none = KubeletReport::from_facts(&facts(None));
        assert_eq!((none.version, none.rwop), (None, KubeletRwop::Unknown));
        assert!(none.summary.starts_with("kubelet version not known (the facts have no Node)"), "{}", none.summary);
        let empty = KubeletReport::from_facts(&facts(Some("")));
        assert!(empty.summary.contains("reports no kubeletVersion"), "{}", empty.summary);
        let json = serde_json::to_value(&old).unwrap();
        assert_eq!(json["version"], "v1.26.15");
        assert_eq!(json["rwop"], "alpha_off_by_default");
    }
}

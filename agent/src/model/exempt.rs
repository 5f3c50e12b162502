//! Readers the operator exempts from the out-of-band check: a backup or log agent that
//! binds kubelet's `pods/` on purpose. Named by namespace and ServiceAccount and/or pod
//! labels, never by namespace alone (one namespace's every pod reading every single-pod
//! volume of the node is too broad to be a reader).
//!
//! Written `NAMESPACE/SERVICEACCOUNT`, `NAMESPACE:KEY=VALUE[,KEY=VALUE]` or both
//! (`NAMESPACE/SERVICEACCOUNT:KEY=VALUE`); all given parts must match.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    str::FromStr,
};

use crate::facts::Pod;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExemptReader {
    pub namespace: String,
    pub service_account: Option<String>,
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExemptReaderError {
    #[error("\"{0}\": an exempt reader needs a namespace (NAMESPACE/SERVICEACCOUNT or NAMESPACE:KEY=VALUE)")]
    NoNamespace(String),
    #[error(
        "\"{0}\": a namespace alone exempts too much; add a ServiceAccount (NAMESPACE/SERVICEACCOUNT) or pod \
         labels (NAMESPACE:KEY=VALUE)"
    )]
    NamespaceOnly(String),
    #[error("\"{spec}\": \"{part}\" is not a KEY=VALUE label with a non-empty key")]
    BadLabel { spec: String, part: String },
    #[error("\"{0}\": the ServiceAccount after '/' is empty")]
    EmptyServiceAccount(String),
}

impl ExemptReader {
    /// Whether `pod` is this reader.
    pub fn matches(&self, pod: &Pod) -> bool {
        pod.namespace == self.namespace
            && self.service_account.as_ref().is_none_or(|account| *account == pod.service_account)
            && self.labels.iter().all(|(key, value)| pod.labels.get(key) == Some(value))
    }
}

/// The UIDs of the pods among `pods` that one of `readers` exempts.
pub fn exempt_pods<'a>(readers: &[ExemptReader], pods: impl IntoIterator<Item = &'a Pod>) -> BTreeSet<String> {
    if readers.is_empty() {
        return BTreeSet::new();
    }
    pods.into_iter().filter(|pod| readers.iter().any(|r| r.matches(pod))).map(|pod| pod.uid.clone()).collect()
}

impl FromStr for ExemptReader {
    type Err = ExemptReaderError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let spec = spec.trim();
        // Namespaces and ServiceAccounts hold no ':'; label keys may hold '/'.
        let (who, labels) = spec.split_once(':').unwrap_or((spec, ""));
        let (namespace, service_account) = match who.split_once('/') {
            Some((_, "")) => return Err(ExemptReaderError::EmptyServiceAccount(spec.into())),
            Some((namespace, account)) => (namespace, Some(account.to_string())),
            None => (who, None),
        };
        if namespace.is_empty() {
            return Err(ExemptReaderError::NoNamespace(spec.into()));
        }
        let mut parsed = BTreeMap::new();
        for part in labels.split(',').filter(|part| !part.is_empty()) {
            match part.split_once('=') {
                Some((key, value)) if !key.is_empty() => parsed.insert(key.to_string(), value.to_string()),
                _ => return Err(ExemptReaderError::BadLabel { spec: spec.into(), part: part.into() }),
            };
        }
        if service_account.is_none() && parsed.is_empty() {
            return Err(ExemptReaderError::NamespaceOnly(spec.into()));
        }
        Ok(Self { namespace: namespace.into(), service_account, labels: parsed })
    }
}

impl fmt::Display for ExemptReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.namespace)?;
        if let Some(account) = &self.service_account {
            write!(f, "/{account}")?;
        }
        let labels: Vec<String> = self.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if !labels.is_empty() {
            write!(f, ":{}", labels.join(","))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::fixtures;

    fn backup_pod() -> Pod {
        let mut pod = fixtures::pod("backup", "uid-b", "restic-x7");
        pod.service_account = "restic".into();
        pod.labels = [("app.kubernetes.io/name".into(), "restic".into()), ("tier".into(), "ops".into())].into();
        pod
    }

    #[test]
    fn the_three_forms_parse_and_print_back() {
        for spec in ["backup/restic", "backup:app.kubernetes.io/name=restic", "backup/restic:tier=ops,x="] {
            let reader: ExemptReader = spec.parse().unwrap();
            assert_eq!(reader.to_string(), spec);
        }
        let reader: ExemptReader = "backup/restic:tier=ops".parse().unwrap();
        assert_eq!(reader.service_account.as_deref(), Some("restic"));
        assert_eq!(reader.labels.get("tier").map(String::as_str), Some("ops"));
    }

    #[test]
    fn exempt_pods_are_those_a_reader_matches() {
        let other = fixtures::pod("backup", "uid-n", "nightly-q2");
        let pods = [backup_pod(), other, fixtures::pod("shop", "uid-a", "db-0")];
        let readers: Vec<ExemptReader> = vec!["backup/restic".parse().unwrap()];
        assert_eq!(exempt_pods(&readers, &pods), BTreeSet::from(["uid-b".to_owned()]));
        assert!(exempt_pods(&[], &pods).is_empty(), "no reader exempts no pod");
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let cases = [
            ("backup", ExemptReaderError::NamespaceOnly("backup".into())),
            ("", ExemptReaderError::NoNamespace("".into())),
            ("/restic", ExemptReaderError::NoNamespace("/restic".into())),
            ("backup/", ExemptReaderError::EmptyServiceAccount("backup/".into())),
            ("backup:", ExemptReaderError::NamespaceOnly("backup:".into())),
            ("backup:tier", ExemptReaderError::BadLabel { spec: "backup:tier".into(), part: "tier".into() }),
            ("backup:=ops", ExemptReaderError::BadLabel { spec: "backup:=ops".into(), part: "=ops".into() }),
        ];
        for (spec, expected) in cases {
            assert_eq!(spec.parse::<ExemptReader>(), Err(expected), "{spec:?}");
        }
    }

    #[test]
    fn every_given_part_must_match() {
        let pod = backup_pod();
        for (spec, matches) in [
            ("backup/restic", true),
            ("backup:app.kubernetes.io/name=restic", true),
            ("backup/restic:tier=ops,app.kubernetes.io/name=restic", true),
            ("other/restic", false),
            ("backup/velero", false),
            ("backup/restic:tier=dev", false),
            ("backup:missing=label", false),
        ] {
            assert_eq!(spec.parse::<ExemptReader>().unwrap().matches(&pod), matches, "{spec}");
        }
    }
}

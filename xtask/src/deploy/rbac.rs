//! Check 5: RBAC. [`RBAC`] is the one list of what the agent may do, and
//! [`SECURE_METRICS_RBAC`] what it may do besides with `metrics.secure`; the chart's
//! ClusterRole must grant exactly the first in the default rendering and both in the
//! non-default one (which turns `metrics.secure` on, and with it the scrapers' ClusterRole
//! [`METRICS_READER`], which must grant exactly `get` on `/metrics`); the agent's code
//! (agent/src, read for its kube API calls) must use exactly their kinds and verbs.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
};

use anyhow::Context;
use serde_json::Value;

use super::{Outcome, Tools, yaml_documents};

/// One rule of what the agent may do, and where in its code the kind comes from.
pub struct Grant {
    /// The Rust type in the agent's code (k8s-openapi's name for the kind).
    pub kind: &'static str,
    /// k8s-openapi module the type comes from; the file using it must name this path.
    pub module: &'static str,
    pub api_group: &'static str,
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
}

const READ: &[&str] = &["get", "list", "watch"];

/// What the agent may do, kept in this one place: the chart's ClusterRole must grant
/// exactly this, and the agent's code (agent/src) must use exactly these kinds with
/// these verbs, except for [`EXTRA_VERBS`].
pub const RBAC: &[Grant] = &[
    Grant { kind: "Pod", module: "core::v1", api_group: "", resource: "pods", verbs: READ },
    Grant { kind: "PersistentVolume", module: "core::v1", api_group: "", resource: "persistentvolumes", verbs: READ },
    Grant {
        kind: "PersistentVolumeClaim",
        module: "core::v1",
        api_group: "",
        resource: "persistentvolumeclaims",
        verbs: READ,
    },
    Grant {
        kind: "CSIDriver",
        module: "storage::v1",
        api_group: "storage.k8s.io",
        resource: "csidrivers",
        verbs: READ,
    },
    Grant { kind: "CSINode", module: "storage::v1", api_group: "storage.k8s.io", resource: "csinodes", verbs: READ },
    // `volguard check --kubernetes` reads this node's Node once, for the kubelet's version.
    Grant { kind: "Node", module: "core::v1", api_group: "", resource: "nodes", verbs: &["get"] },
    // Only create: the agent posts each Event once and never patches a series (events.rs).
    Grant { kind: "Event", module: "events::v1", api_group: "events.k8s.io", resource: "events", verbs: &["create"] },
];

/// With `metrics.secure` only: the token and access reviews of the callers of /metrics
/// (agent/src/outputs/metrics_auth/reviews.rs).
pub const SECURE_METRICS_RBAC: &[Grant] = &[
    Grant {
        kind: "TokenReview",
        module: "authentication::v1",
        api_group: "authentication.k8s.io",
        resource: "tokenreviews",
        verbs: &["create"],
    },
    Grant {
        kind: "SubjectAccessReview",
        module: "authorization::v1",
        api_group: "authorization.k8s.io",
        resource: "subjectaccessreviews",
        verbs: &["create"],
    },
];

/// The name suffix of the ClusterRole a scraper is bound to with `metrics.secure`.
const METRICS_READER: &str = "-metrics-reader";

fn all_grants() -> impl Iterator<Item = &'static Grant> {
    RBAC.iter().chain(SECURE_METRICS_RBAC)
}

/// Verbs granted although no code calls them, and why.
const EXTRA_VERBS: &[(&str, &str)] = &[(
    "get",
    "issue 7 asks for get/list/watch on the read kinds; the watchers only list and watch, \
     and get reads nothing list does not already return",
)];

/// How the code shows each verb (in a file that uses the kube API).
const VERB_MARKERS: &[(&str, &[&str])] = &[
    ("list", &["watcher(", "reflector(", ".list(", ".list_metadata("]),
    ("watch", &["watcher(", "reflector(", ".watch(", ".watch_metadata("]),
    ("get", &[".get_opt(", ".get_metadata(", ".get_status("]),
    ("create", &[".create("]),
    ("patch", &[".patch(", ".patch_status(", ".patch_metadata("]),
    ("update", &[".replace(", ".replace_status("]),
    ("delete", &[".delete(", ".delete_collection("]),
];

/// Where a typed kube API names its kind: `Api<Pod>`, `Writer::<Pod>`, …
const KIND_MARKERS: &[&str] = &["Api<", "Api::<", "Writer<", "Writer::<", "Store<", "Store::<", "ObjectRef<"];

/// Kinds followed one object at a time (`impl Followed for PersistentVolume`) are listed and
/// watched by the file that defines the trait (agent/src/facts/k8s/object_watch.rs): they
/// take that file's verbs.
const FOLLOWED_KIND_MARKER: &str = "Followed for ";
const FOLLOWED_TRAIT: &str = "trait Followed";

/// `(apiGroup, resource, verb)` triples.
type Triples = BTreeSet<(String, String, String)>;

fn granted_by_list<'a>(grants: impl Iterator<Item = &'a Grant>) -> Triples {
    grants
        .flat_map(|g| g.verbs.iter().map(|v| (g.api_group.to_owned(), g.resource.to_owned(), (*v).to_owned())))
        .collect()
}

/// The agent's role's grants, and the rules of the scrapers' role ([`METRICS_READER`]) if any.
fn granted_by_role(t: &Tools, rendered: &Path) -> Result<(Triples, Option<Value>), String> {
    let docs = yaml_documents(t, rendered).map_err(|e| format!("{e:#}"))?;
    let is_reader = |d: &Value| d["metadata"]["name"].as_str().is_some_and(|n| n.ends_with(METRICS_READER));
    let roles: Vec<&Value> =
        docs.iter().filter(|d| (d["kind"] == "ClusterRole" || d["kind"] == "Role") && !is_reader(d)).collect();
    let reader = docs.iter().find(|d| d["kind"] == "ClusterRole" && is_reader(d)).map(|r| r["rules"].clone());
    let [role] = roles.as_slice() else {
        return Err(format!("expected one (Cluster)Role for the agent in the rendering, found {}", roles.len()));
    };
    let strings = |v: &Value| -> Vec<String> {
        v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect()).unwrap_or_default()
    };
    let mut triples = Triples::new();
    for rule in role["rules"].as_array().into_iter().flatten() {
        if rule.get("resourceNames").is_some() || rule.get("nonResourceURLs").is_some() {
            return Err(format!("a rule the check does not understand: {rule}"));
        }
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    triples.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    Ok((triples, reader))
}

/// The one rule a scraper needs: `get` on the non-resource URL `/metrics`.
fn reader_rules() -> Value {
    serde_json::json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
}

fn show(t: &(String, String, String)) -> String {
    let group = if t.0.is_empty() { "core" } else { &t.0 };
    format!("{} {group}/{}", t.2, t.1)
}

/// The kinds the agent's code uses through kube, and the verbs of each file they are in.
fn used_by_code(root: &Path) -> anyhow::Result<Vec<(String, PathBuf, BTreeSet<&'static str>)>> {
    let mut found = Vec::new();
    let (mut followed, mut follower_verbs) = (Vec::new(), None);
    for file in crate::proc::rust_files(&root.join("agent/src"))? {
        let text = fs::read_to_string(&file)?;
        if !text.contains("kube::") && !text.contains("use kube") {
            continue;
        }
        // Code only: the unit tests (last in a file) and line comments out (tests use kinds
        // of their own; docs mention kinds and verbs in prose).
        let shipped = text.split("#[cfg(test)]").next().unwrap_or_default();
        let code: String =
            shipped.lines().map(|l| l.split_once("//").map_or(l, |(before, _)| before)).collect::<Vec<_>>().join("\n");
        let verbs: BTreeSet<&'static str> = VERB_MARKERS
            .iter()
            .filter(|(_, markers)| markers.iter().any(|m| code.contains(m)))
            .map(|(verb, _)| *verb)
            .collect();
        let relative = file.strip_prefix(root).unwrap_or(&file).to_path_buf();
        for kind in kinds_after(&code, KIND_MARKERS) {
            found.push((kind, relative.clone(), verbs.clone()));
        }
        for kind in kinds_after(&code, &[FOLLOWED_KIND_MARKER]) {
            followed.push((kind, relative.clone()));
        }
        if code.contains(FOLLOWED_TRAIT) {
            follower_verbs = Some(verbs);
        }
    }
    if !followed.is_empty() {
        let verbs = follower_verbs.with_context(|| format!("`{FOLLOWED_TRAIT}` not found in agent/src"))?;
        found.extend(followed.into_iter().map(|(kind, file)| (kind, file, verbs.clone())));
    }
    Ok(found)
}

/// The kinds named right after any of `markers` in `code`.
fn kinds_after(code: &str, markers: &[&str]) -> BTreeSet<String> {
    let mut kinds = BTreeSet::new();
    for marker in markers {
        for (at, _) in code.match_indices(marker) {
            let rest = &code[at + marker.len()..];
            // `Api<Pod>` or `Api<k8s_openapi::api::core::v1::Pod>`: the last path segment.
            let path: String =
                rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':').collect();
            let kind = path.rsplit("::").next().unwrap_or_default().to_owned();
            // Generic parameters (`Api<K>`) are not kinds.
            if kind.len() > 1 && kind.starts_with(|c: char| c.is_ascii_uppercase()) {
                kinds.insert(kind);
            }
        }
    }
    kinds
}

pub(super) fn rbac(t: &Tools, root: &Path, work: &Path) -> Outcome {
    let mut problems = Vec::new();

    // The role, as rendered with default values (RBAC) and non-default ones (metrics.secure
    // on: RBAC and SECURE_METRICS_RBAC), against the lists.
    for (file, lists, grants, reader) in [
        ("default-values.yaml", "RBAC", granted_by_list(RBAC.iter()), None),
        (
            "non-default-values.yaml",
            "RBAC and SECURE_METRICS_RBAC",
            granted_by_list(all_grants()),
            Some(reader_rules()),
        ),
    ] {
        let (by_role, by_reader) = granted_by_role(t, &work.join(file))?;
        for missing in grants.difference(&by_role) {
            problems
                .push(format!("{file}: the ClusterRole lacks `{}` ({lists}, xtask/src/deploy/rbac.rs)", show(missing)));
        }
        for extra in by_role.difference(&grants) {
            problems.push(format!(
                "{file}: the ClusterRole grants `{}`, which {lists} in xtask/src/deploy/rbac.rs do not list",
                show(extra)
            ));
        }
        if by_reader != reader {
            problems.push(format!("{file}: the ClusterRole *{METRICS_READER}: {by_reader:?}, expected {reader:?}"));
        }
    }
    let by_list = granted_by_list(all_grants());

    // The list against the code.
    let used = used_by_code(root).map_err(|e| format!("{e:#}"))?;
    if used.is_empty() {
        problems.push("found no kube API use in agent/src: the check's markers are out of date".into());
    }
    let mut needed: BTreeSet<(String, String, String)> = BTreeSet::new();
    for (kind, file, verbs) in &used {
        let Some(grant) = all_grants().find(|g| g.kind == kind) else {
            problems.push(format!("{} uses kind {kind}, which the role does not grant", file.display()));
            continue;
        };
        let text = fs::read_to_string(root.join(file)).unwrap_or_default();
        if !text.contains(grant.module) {
            problems.push(format!(
                "{} uses {kind} but not from k8s_openapi's {} (RBAC assumes apiGroup {:?})",
                file.display(),
                grant.module,
                grant.api_group
            ));
        }
        if verbs.is_empty() {
            problems.push(format!("{} uses {kind} but no API call the check recognises", file.display()));
        }
        for verb in verbs {
            needed.insert((grant.api_group.to_owned(), grant.resource.to_owned(), (*verb).to_owned()));
        }
    }
    for grant in all_grants() {
        if !used.iter().any(|(kind, _, _)| kind == grant.kind) {
            problems.push(format!("the role grants {} ({}), which agent/src does not use", grant.resource, grant.kind));
        }
    }
    for missing in needed.difference(&by_list) {
        problems.push(format!("the code needs `{}`, which the role does not grant", show(missing)));
    }
    let mut extras = BTreeSet::new();
    for extra in by_list.difference(&needed) {
        if let Some((verb, _)) = EXTRA_VERBS.iter().find(|(v, _)| *v == extra.2) {
            extras.insert(*verb);
        } else {
            problems.push(format!("the role grants `{}`, which the code never calls", show(extra)));
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("\n"));
    }
    let kinds: BTreeSet<&str> = used.iter().map(|(k, _, _)| k.as_str()).collect();
    let mut detail = format!(
        "{} (group, resource, verb) grants for {} kinds ({}): in the role, the list and the code",
        by_list.len(),
        kinds.len(),
        kinds.into_iter().collect::<Vec<_>>().join(", ")
    );
    for verb in extras {
        let why = EXTRA_VERBS.iter().find(|(v, _)| *v == verb).map_or("", |(_, w)| w);
        detail += &format!("; `{verb}` granted though uncalled ({why})");
    }
    Ok(detail)
}

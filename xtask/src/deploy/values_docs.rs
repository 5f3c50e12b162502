//! Check 7: deploy/README.md's values table lists exactly the keys of values.yaml.

use std::{collections::BTreeSet, fs, path::Path};

use serde_json::Value;

use super::{CHART, Outcome, Tools, yaml_documents};

/// Dotted keys of values.yaml: maps are descended into, except [`OPAQUE_VALUES`]
/// (Kubernetes objects passed through whole); lists and scalars are leaves.
fn value_keys(prefix: &str, value: &Value, out: &mut BTreeSet<String>) {
    match value.as_object() {
        Some(map) if !map.is_empty() && !OPAQUE_VALUES.contains(&prefix) => {
            for (key, child) in map {
                let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
                value_keys(&path, child, out);
            }
        }
        _ => {
            out.insert(prefix.to_owned());
        }
    }
}

const OPAQUE_VALUES: &[&str] = &["resources", "nodeSelector"];
const VALUES_START: &str = "<!-- values:start";
const VALUES_END: &str = "<!-- values:end";

/// The documents whose values table must list exactly `values.yaml`'s keys.
const VALUES_TABLES: &[&str] = &["deploy/README.md", "docs/configuration.md"];

pub(super) fn values_documented(t: &Tools, root: &Path) -> Outcome {
    let values = yaml_documents(t, &root.join(CHART).join("values.yaml")).map_err(|e| format!("{e:#}"))?;
    let mut keys = BTreeSet::new();
    value_keys("", values.first().unwrap_or(&Value::Null), &mut keys);
    let mut problems = Vec::new();
    for doc in VALUES_TABLES {
        if let Err(e) = table_lists(&root.join(doc), doc, &keys) {
            problems.push(e);
        }
    }
    if problems.is_empty() {
        Ok(format!("{} keys documented in {}", keys.len(), VALUES_TABLES.join(" and ")))
    } else {
        Err(problems.join("\n"))
    }
}

/// Whether the values table of `doc` (between the markers) lists exactly `keys`.
fn table_lists(path: &Path, doc: &str, keys: &BTreeSet<String>) -> Result<(), String> {
    let readme = fs::read_to_string(path).map_err(|e| format!("{doc}: {e}"))?;
    // Rows of the values table (between the markers): `| `key` | …`.
    let Some((_, table)) = readme.split_once(VALUES_START) else {
        return Err(format!("{doc} has no {VALUES_START}"));
    };
    let Some((table, _)) = table.split_once(VALUES_END) else {
        return Err(format!("{doc} has no {VALUES_END}"));
    };
    let documented: BTreeSet<String> = table
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once("` |").map(|(key, _)| key.to_owned()))
        .filter(|k| !k.contains(' '))
        .collect();
    let mut problems = Vec::new();
    for missing in keys.difference(&documented) {
        problems.push(format!("values.yaml has `{missing}`, the values table of {doc} does not"));
    }
    for extra in documented.difference(keys) {
        problems.push(format!("the values table of {doc} has `{extra}`, values.yaml does not"));
    }
    if problems.is_empty() { Ok(()) } else { Err(problems.join("\n")) }
}

//! PromQL as the dashboard and alert-rule checks read it: the metrics the agent exports
//! (asked of the agent itself) and the metric names an expression selects.

use std::collections::BTreeSet;

use anyhow::Context;

use crate::proc::output;

/// The metrics the agent exports, from the agent itself (`volguard metrics-reference
/// --names`, generated from its registry): `(name, type)`.
pub struct Exported(Vec<(String, String)>);

impl Exported {
    pub fn from_agent() -> anyhow::Result<Self> {
        let listing = output(crate::proc::cargo().args([
            "run",
            "-q",
            "--locked",
            "-p",
            "volguard",
            "--",
            "metrics-reference",
            "--names",
        ]))
        .context("asking the agent for its metrics (cargo run -p volguard -- metrics-reference --names)")?;
        Ok(Self::parse(&listing))
    }

    fn parse(listing: &str) -> Self {
        Self(
            listing
                .lines()
                .filter_map(|l| l.split_once(' ').map(|(n, k)| (n.trim().to_owned(), k.trim().to_owned())))
                .collect(),
        )
    }

    /// A series name the agent exports: a family, or a histogram's `_bucket`/`_sum`/`_count`.
    pub fn knows(&self, name: &str) -> bool {
        self.0.iter().any(|(family, kind)| {
            family == name
                || (kind == "histogram"
                    && ["_bucket", "_sum", "_count"].iter().any(|s| name.strip_suffix(s) == Some(family.as_str())))
        })
    }
}

/// The metric names a (parseable) PromQL expression selects: identifiers outside strings,
/// `{...}` matchers, `[...]` ranges and `by/without/on/ignoring/group_*(...)` label lists,
/// that are neither keywords nor function calls. `{__name__="..."}` is not handled.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    const KEYWORDS: &[&str] = &["and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"];
    // Aggregations may put `by (...)` between their name and `(`.
    const AGGREGATIONS: &[&str] = &[
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    ];
    const LABEL_LISTS: &[&str] = &["by", "without", "on", "ignoring", "group_left", "group_right"];
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let mut skip_list = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => {
                i += 1;
                while i < chars.len() && chars[i] != c {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            }
            '{' | '[' => {
                let close = if c == '{' { '}' } else { ']' };
                while i < chars.len() && chars[i] != close {
                    i += 1;
                }
                i += 1;
            }
            '(' if skip_list => {
                while i < chars.len() && chars[i] != ')' {
                    i += 1;
                }
                skip_list = false;
                i += 1;
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let next = chars[i..].iter().find(|c| !c.is_whitespace());
                if LABEL_LISTS.contains(&word.as_str()) {
                    skip_list = true;
                } else if next != Some(&'(')
                    && !KEYWORDS.contains(&word.to_ascii_lowercase().as_str())
                    && !AGGREGATIONS.contains(&word.as_str())
                {
                    names.insert(word);
                }
            }
            c if c.is_ascii_digit() || c == '.' => {
                // A number or a duration (5m, 1e-9, 0x1f): its letters are not names.
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_metric_names() {
        let names = metric_names(
            r#"histogram_quantile(0.99, sum by (le, operation_name) (rate(storage_operation_duration_seconds_bucket{le=~"10|10\\.0", x="a b"}[5m]))) / on (node) group_left (version) max without (instance) (volguard_build_info) > bool 1e-9 or vector(0)"#,
        );
        assert_eq!(
            names.into_iter().collect::<Vec<_>>(),
            ["storage_operation_duration_seconds_bucket", "volguard_build_info"]
        );
    }

    fn sample() -> Exported {
        Exported::parse("storage_operation_duration_seconds histogram\nvolguard_conflicts_total counter\n")
    }

    #[test]
    fn known_metrics_include_histogram_series() {
        let exported = sample();
        assert!(exported.knows("storage_operation_duration_seconds_count"));
        assert!(exported.knows("volguard_conflicts_total"));
        assert!(!exported.knows("volguard_conflicts_total_bucket"));
        assert!(!exported.knows("kubelet_volume_stats_used_bytes"));
    }
}

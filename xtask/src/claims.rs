//! Claims a reader can trust: every test a document names as the proof of a claim exists,
//! and every route docs/enforcement.md lists names the test that proves it. A renamed or
//! deleted test, or a route added without one, fails `cargo test` (and so CI).

/// Where the agent's integration tests live, one file per area (`host_out_of_band.rs`).
const INTEGRATION: &str = "agent/tests/integration";

/// Each `area::test_name` (or `area::module::test_name`, a module of the area in its
/// folder) a text names in backticks whose area is an integration-test file, as (the
/// test's file without `.rs` under [`INTEGRATION`], test name).
fn named_tests(text: &str, areas: &[String]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let is_ident =
        |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    for quoted in text.split('`').skip(1).step_by(2) {
        let Some((area, rest)) = quoted.split_once("::") else { continue };
        let (file, name) = match rest.split_once("::") {
            Some((module, name)) if is_ident(module) => (format!("{area}/{module}"), name),
            _ => (area.to_owned(), rest),
        };
        if areas.iter().any(|a| a == area) && is_ident(name) {
            found.push((file, name.to_owned()));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::proc::workspace_root;

    fn areas() -> Vec<String> {
        fs::read_dir(workspace_root().join(INTEGRATION))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".rs").map(str::to_owned))
            .collect()
    }

    fn docs() -> Vec<(String, String)> {
        let root = workspace_root();
        let mut files = vec![root.join("README.md")];
        files.extend(fs::read_dir(root.join("docs")).unwrap().map(|e| e.unwrap().path()));
        files
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .map(|p| (p.strip_prefix(&root).unwrap().display().to_string(), fs::read_to_string(&p).unwrap()))
            .collect()
    }

    #[test]
    fn every_test_the_docs_name_exists() {
        let areas = areas();
        let mut missing = Vec::new();
        let mut named = 0;
        for (doc, text) in docs() {
            for (area, name) in named_tests(&text, &areas) {
                named += 1;
                let source = fs::read_to_string(workspace_root().join(INTEGRATION).join(format!("{area}.rs"))).unwrap();
                if !source.contains(&format!("fn {name}(")) {
                    missing.push(format!("{doc}: `{area}::{name}`"));
                }
            }
        }
        assert!(named > 0, "the docs name no test at all");
        assert!(missing.is_empty(), "tests the docs name that do not exist:\n{}", missing.join("\n"));
    }

    #[test]
    fn every_route_of_the_enforcement_doc_names_its_test() {
        let text = fs::read_to_string(workspace_root().join("docs/enforcement.md")).unwrap();
        let areas = areas();
        let section = |heading: &str| -> String {
            let start = text.find(heading).unwrap_or_else(|| panic!("docs/enforcement.md has no {heading:?}"));
            let rest = &text[start + heading.len()..];
            rest[..rest.find("\n## ").unwrap_or(rest.len())].to_owned()
        };
        let covered = section("## Routes covered");
        let bullets: Vec<&str> = covered.split("\n- ").skip(1).collect();
        assert!(!bullets.is_empty(), "\"Routes covered\" lists no route");
        for bullet in bullets {
            assert!(!named_tests(bullet, &areas).is_empty(), "a covered route names no test: {bullet}");
        }
        let access = section("## Access outside kubelet's publish");
        let rows: Vec<&str> = access
            .lines()
            .skip_while(|l| !l.starts_with("| route (`route` label)"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .collect();
        assert!(rows.len() >= 5, "the route table has {} rows", rows.len());
        for row in rows {
            let tested_by = row.trim_end_matches('|').rsplit('|').next().unwrap_or_default();
            assert!(!named_tests(tested_by, &areas).is_empty(), "a route names no test: {row}");
        }
    }

    #[test]
    fn test_names_are_read_from_backticks_only_where_the_area_is_a_test_file() {
        let areas = vec!["host_trace".to_owned()];
        let text = "see `host_trace::a_test` and `model::access` and host_trace::bare and `host_trace::Type`";
        assert_eq!(named_tests(text, &areas), [("host_trace".to_owned(), "a_test".to_owned())]);
        let in_module = "`host_trace::part::b_test` and `host_trace::Part::c_test`";
        assert_eq!(named_tests(in_module, &areas), [("host_trace/part".to_owned(), "b_test".to_owned())]);
    }
}

//! One name per type in the agent (`cargo xtask layers`): two structs, enums, traits or
//! type aliases of `agent/src` with one name make a reader ask which one a line means.
//! Tests' own types (in a `#[cfg(test)]` module) and associated types are left out.

use std::{collections::BTreeMap, fs, path::Path};

use anyhow::Context;

/// Where the rule applies.
const TREE: &str = "agent/src";

/// Every type name `agent/src` defines more than once, with where: one line each.
pub fn violations(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut defined: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in crate::proc::rust_files(&root.join(TREE))? {
        let source = fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        let shown = file.strip_prefix(root).unwrap_or(&file).display().to_string();
        for (name, line) in type_definitions(&source) {
            defined.entry(name).or_default().push(format!("{shown}:{line}"));
        }
    }
    Ok(defined
        .into_iter()
        .filter(|(_, places)| places.len() > 1)
        .map(|(name, places)| format!("type name {name} is defined {} times: {}", places.len(), places.join(", ")))
        .collect())
}

/// The types `source` defines outside its test module, each with its line (from 1). A
/// test module runs from its `#[cfg(test)]` to the end of the file, as rustfmt's layout
/// and this house's files have it.
fn type_definitions(source: &str) -> Vec<(String, usize)> {
    source
        .lines()
        .take_while(|line| line.trim() != "#[cfg(test)]")
        .enumerate()
        .filter_map(|(i, line)| defined_type(line).map(|name| (name, i + 1)))
        .collect()
}

/// The type a line defines: a struct, enum or trait at any depth, a type alias at the
/// top (an indented `type` is an associated type).
fn defined_type(line: &str) -> Option<String> {
    let indented = line.starts_with(' ');
    let mut words = line.split_whitespace().skip_while(|w| w.starts_with("pub"));
    let defines = match words.next()? {
        "struct" | "enum" | "trait" => true,
        "type" => !indented,
        _ => false,
    };
    if !defines {
        return None;
    }
    let name: String = words.next()?.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    name.starts_with(|c: char| c.is_ascii_uppercase()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_are_found_outside_tests_and_associated_types() {
        let source = "pub struct Conflict {\n}\npub(super) enum Seen<'a> {}\n\
                      type Effects<'e> = Vec<u8>;\nimpl X {\n    type Fact = String;\n}\n\
                      pub(crate) trait Reads {}\n// struct InAComment\nlet struct_ = 1;\n\
                      #[cfg(test)]\nmod tests {\n    struct Fixed;\n}\n";
        let found: Vec<String> = type_definitions(source).into_iter().map(|(name, _)| name).collect();
        assert_eq!(found, ["Conflict", "Seen", "Effects", "Reads"]);
    }
}

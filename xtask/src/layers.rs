//! `cargo xtask layers`: the agent's layer rules, checked. The layers are the table at the
//! top of `agent/src/lib.rs` (one row per layer, lowest first; folders named in one row
//! are peers): a module may import from its own folder and from lower layers only, never
//! from a peer or a higher one; the top-level modules of agent/src and of xtask/src (each
//! file `x.rs` or folder `x/` under `src/`) never import each other in a cycle, nor do the
//! files of one folder below them; and only the kernel boundary (`agent/src/kernel/`) may
//! name aya, in the library, the binary and the tests alike. It also checks the size
//! rules ([`crate::sizes`]).

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context, bail};

const LIB: &str = "agent/src/lib.rs";
const KERNEL_BOUNDARY: &str = "kernel";

/// Runs both checks over the workspace at `root`; the error lists every violation.
pub fn run(root: &Path) -> anyhow::Result<()> {
    let lib = fs::read_to_string(root.join(LIB)).with_context(|| format!("reading {LIB}"))?;
    let ranks = layer_ranks(&lib)?;
    let mut violations = Vec::new();
    for file in crate::proc::rust_files(&root.join("agent/src"))? {
        let relative = file.strip_prefix(root.join("agent/src")).unwrap_or(&file);
        let source = fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        let folder = relative.components().next().and_then(|c| c.as_os_str().to_str()).unwrap_or_default();
        let folder = folder.strip_suffix(".rs").unwrap_or(folder);
        if let Some(&own) = ranks.get(folder) {
            for imported in imported_layers(&source) {
                match ranks.get(imported.as_str()) {
                    Some(&rank) if imported != folder && rank >= own => violations.push(format!(
                        "agent/src/{}: `{folder}` imports `{imported}`, {}",
                        relative.display(),
                        if rank == own { "a peer layer" } else { "a higher layer" }
                    )),
                    _ => {}
                }
            }
        }
        if folder != KERNEL_BOUNDARY && names_aya(&source) {
            violations
                .push(format!("agent/src/{}: names aya outside agent/src/{KERNEL_BOUNDARY}/", relative.display()));
        }
    }
    for file in crate::proc::rust_files(&root.join("agent/tests"))? {
        if names_aya(&fs::read_to_string(&file)?) {
            violations.push(format!("{}: names aya (tests go through volguard::kernel)", file.display()));
        }
    }
    for crate_src in ["agent/src", "xtask/src"] {
        let src = root.join(crate_src);
        violations.extend(
            top_level_cycles(&src)?
                .into_iter()
                .map(|cycle| format!("{crate_src}: an import cycle between top-level modules: {}", cycle.join(" -> "))),
        );
        violations.extend(
            sibling_cycles(&src)?.into_iter().map(|cycle| {
                format!("{crate_src}: an import cycle between files of one folder: {}", cycle.join(" -> "))
            }),
        );
    }
    violations.extend(crate::sizes::violations(root)?);
    violations.extend(crate::type_names::violations(root)?);
    if !violations.is_empty() {
        bail!("{} layer, size or naming violation(s):\n  {}", violations.len(), violations.join("\n  "));
    }
    let layers = ranks.values().collect::<std::collections::BTreeSet<_>>().len();
    println!(
        "layers: {} folders in {layers} layers, every import points down; no import cycle between the \
         top-level modules nor inside a folder (agent/src, xtask/src); aya only in agent/src/{KERNEL_BOUNDARY}/; \
         no file over the size rules' lines, no agent function over them without a reason; one name per \
         type in agent/src",
        ranks.len()
    );
    Ok(())
}

/// The folders of each row of lib.rs's layer table, ranked from 0 (the lowest row).
fn layer_ranks(lib: &str) -> anyhow::Result<BTreeMap<String, usize>> {
    let mut ranks = BTreeMap::new();
    let rows = lib.lines().filter_map(|l| l.strip_prefix("//! | `")).map(|row| row.split(" |").next().unwrap_or(""));
    for (rank, first_cell) in rows.enumerate() {
        for name in format!("`{first_cell}").split(',') {
            let name = name.trim().trim_matches('`');
            if !name.is_empty() {
                ranks.insert(name.to_owned(), rank);
            }
        }
    }
    if ranks.len() < 2 {
        bail!("{LIB} has no layer table (rows `//! | `folder` | ... |`)");
    }
    Ok(ranks)
}

/// Cycles of imports between the top-level modules of the crate at `src`: each file `x.rs`
/// or folder `x/` directly under it (the crate roots main.rs, lib.rs and build.rs are none).
/// `x` imports `y` where any file of `x` names `crate::y`, or its own root file (`x.rs`,
/// `x/mod.rs`) names `super::y`. Each cycle once, as the modules' names in order.
fn top_level_cycles(src: &Path) -> anyhow::Result<Vec<Vec<String>>> {
    let mut modules: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in crate::proc::rust_files(src)? {
        let relative = file.strip_prefix(src).unwrap_or(&file).to_owned();
        let Some(first) = relative.components().next().and_then(|c| c.as_os_str().to_str()) else { continue };
        let at_top = relative.parent() == Some(Path::new(""));
        let name = if at_top { first.strip_suffix(".rs").unwrap_or(first) } else { first };
        let stem = relative.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        // The crate roots declare every module; a folder's `tests.rs` is its unit tests.
        if (at_top && ["main", "lib", "build"].contains(&name)) || (!at_top && stem == "tests") {
            continue;
        }
        let source = fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        let source = source.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
        let mut named = paths_after(source, "crate::");
        if at_top || relative == Path::new(first).join("mod.rs") {
            named.extend(paths_after(source, "super::"));
        }
        modules.entry(name.to_owned()).or_default().extend(named);
    }
    Ok(cycles_among(&modules))
}

/// Cycles of imports between the sibling files of each folder below the top-level modules
/// of `src` (those are [`top_level_cycles`]'s). A folder's `mod.rs` is its parent, not a
/// sibling; a child folder is one sibling. A file names a sibling `x` as `super::x`, or as
/// `crate::<folder>::x` in a top-level folder. Each cycle once, as the files' module names
/// in order.
fn sibling_cycles(src: &Path) -> anyhow::Result<Vec<Vec<String>>> {
    let mut folders: BTreeMap<PathBuf, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for file in crate::proc::rust_files(src)? {
        let relative = file.strip_prefix(src).unwrap_or(&file).to_owned();
        let Some(stem) = relative.file_stem().and_then(|s| s.to_str()) else { continue };
        // A sibling is a file `x.rs` or a folder `x/` (through any file in it).
        let (folder, name) = match relative.parent() {
            Some(parent) if ["mod", "tests"].contains(&stem) && parent != Path::new("") => {
                if stem == "tests" {
                    continue;
                }
                let grand = parent.parent().unwrap_or(Path::new("")).to_owned();
                (grand, parent.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned())
            }
            Some(parent) => (parent.to_owned(), stem.to_owned()),
            None => continue,
        };
        if folder == Path::new("") {
            continue;
        }
        let source = fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        // A file's unit tests may use a sibling to build their inputs: not the code's imports.
        let source = source.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
        let mut named = paths_after(source, "super::");
        if folder.components().count() == 1 {
            named.extend(paths_after(source, &format!("crate::{}::", folder.display())));
        }
        folders.entry(folder).or_default().entry(name).or_default().extend(named);
    }
    let mut cycles = Vec::new();
    for (folder, files) in &folders {
        for cycle in cycles_among(files) {
            cycles.push(cycle.iter().map(|n| format!("{}/{n}", folder.display())).collect());
        }
    }
    Ok(cycles)
}

/// The import cycles among `modules` (each with the names it imports; a name of no module
/// in `modules`, or its own, is no edge), each once.
fn cycles_among(modules: &BTreeMap<String, Vec<String>>) -> Vec<Vec<String>> {
    let edges: BTreeMap<&str, Vec<&str>> = modules
        .iter()
        .map(|(name, named)| {
            let mut to: Vec<&str> =
                named.iter().map(String::as_str).filter(|n| *n != name && modules.contains_key(*n)).collect();
            to.sort_unstable();
            to.dedup();
            (name.as_str(), to)
        })
        .collect();
    find_cycles(&edges).into_iter().map(|cycle| cycle.into_iter().map(str::to_owned).collect()).collect()
}

/// Each elementary cycle of `edges` once, starting at its smallest node (depth-first; the
/// graphs are small: a crate's top-level modules, a folder's files).
fn find_cycles<'a>(edges: &BTreeMap<&'a str, Vec<&'a str>>) -> Vec<Vec<&'a str>> {
    fn walk<'a>(
        edges: &BTreeMap<&'a str, Vec<&'a str>>,
        start: &'a str,
        path: &mut Vec<&'a str>,
        found: &mut Vec<Vec<&'a str>>,
    ) {
        let last = *path.last().expect("a path starts with its start");
        for &next in edges.get(last).map(Vec::as_slice).unwrap_or_default() {
            if next == start {
                let mut cycle = path.clone();
                cycle.push(start);
                found.push(cycle);
            } else if next > start && !path.contains(&next) {
                path.push(next);
                walk(edges, start, path, found);
                path.pop();
            }
        }
    }
    let mut found = Vec::new();
    for &start in edges.keys() {
        walk(edges, start, &mut vec![start], &mut found);
    }
    found
}

/// The first segment of every `crate::` path, including each top-level item of a
/// `crate::{...}` group. Comments are skipped (doc links may point anywhere).
fn imported_layers(source: &str) -> Vec<String> {
    paths_after(source, "crate::")
}

/// The first segment after every `prefix` (a path prefix such as `crate::` or `super::`),
/// including each top-level item of a `prefix{...}` group. Comments are skipped.
fn paths_after(source: &str, prefix: &str) -> Vec<String> {
    let code: String = source.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
    let mut found = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        let before = &code[..at];
        // e.g. `volguard_crate::`, or the second half of `super::super::`.
        let inside_another =
            before.chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_') || before.ends_with("::");
        if inside_another {
            continue;
        }
        let rest = &code[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if c.is_whitespace() => {}
                    _ if item_start && depth == 0 => {
                        found.push(leading_ident(&group[i..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            found.push(leading_ident(rest));
        }
    }
    found.retain(|s| !s.is_empty());
    found
}

fn leading_ident(s: &str) -> String {
    s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

/// `aya` as a path or crate name in code (not in comments): `aya::`, `use aya`.
fn names_aya(source: &str) -> bool {
    source.lines().filter(|l| !l.trim_start().starts_with("//")).any(|line| {
        line.match_indices("aya").any(|(at, _)| {
            let before = line[..at].chars().next_back();
            let after = &line[at + 3..];
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-')
                && (after.starts_with("::") || after.starts_with(';') || after.starts_with(" as "))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIB_TABLE: &str = "//! | layer | holds |\n//! |---|---|\n//! | `sys`, `node_files` | a |\n//! | `kernel` | b |\n//! | `agent`, `cli` | c |\n";

    #[test]
    fn ranks_come_from_the_table_rows_and_peers_share_one() {
        let ranks = layer_ranks(LIB_TABLE).unwrap();
        assert_eq!(ranks["sys"], 0);
        assert_eq!(ranks["node_files"], 0);
        assert_eq!(ranks["kernel"], 1);
        assert_eq!(ranks["cli"], ranks["agent"]);
        assert!(!ranks.contains_key("layer"), "the header row is not a layer");
    }

    #[test]
    fn imports_are_found_in_paths_and_groups() {
        let source = "use crate::{\n    kernel::{maps, pins::Pins},\n    model::node::NodeModel,\n};\n// crate::demo in a comment\nfn f() { crate::facts::Facts::default(); }\n";
        assert_eq!(imported_layers(source), ["kernel", "model", "facts"]);
    }

    #[test]
    fn sibling_imports_and_their_cycles() {
        let source = "use super::{judge::Judge, report};\nuse super::super::up;\nfn f() { crate::csi::rules::x(); }";
        assert_eq!(paths_after(source, "super::"), ["judge", "report", "super"]);
        assert_eq!(paths_after(source, "crate::csi::"), ["rules"]);
        let edges = BTreeMap::from([("a", vec!["b"]), ("b", vec!["c", "a"]), ("c", vec!["b"]), ("d", vec!["a"])]);
        assert_eq!(find_cycles(&edges), [vec!["a", "b", "a"], vec!["b", "c", "b"]]);
    }

    #[test]
    fn top_level_modules_import_each_other_through_any_of_their_files() {
        let src = std::env::temp_dir().join(format!("volguard-layers-test-{}", std::process::id()));
        let files = [
            // The crate root names every module: no edges.
            ("main.rs", "mod a;\nmod b;\nmod c;\nfn main() { crate::a::f(); crate::c::f(); }\n"),
            ("a.rs", "use crate::b::inner::g;\n"),
            // A folder imports through a file below its mod.rs.
            ("b/mod.rs", "pub mod inner;\n"),
            ("b/inner.rs", "use crate::{a, proc::x};\n"),
            // A top-level file's `super::` is the crate's; its unit tests import nothing.
            ("c.rs", "use super::b;\n#[cfg(test)]\nmod tests {\n    use crate::a;\n}\n"),
            ("b/tests.rs", "use crate::c;\n"),
        ];
        for (path, text) in files {
            let path = src.join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        let cycles = top_level_cycles(&src);
        fs::remove_dir_all(&src).unwrap();
        assert_eq!(cycles.unwrap(), [vec!["a", "b", "a"]]);
    }

    #[test]
    fn aya_is_found_in_code_but_not_in_comments_or_other_names() {
        assert!(names_aya("use aya::maps::Map;"));
        assert!(names_aya("fn f(e: aya::Ebpf) {}"));
        assert!(!names_aya("// aya::Ebpf lives in kernel/"));
        assert!(!names_aya("use volguard_aya_free::x; let papaya = 1;"));
    }
}

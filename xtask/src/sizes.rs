//! The house's size rules, checked with the layers (`cargo xtask layers`): no Rust file of
//! the workspace over [`MAX_FILE_LINES`] lines, tests included, and no function of the
//! agent's crates over [`MAX_FN_LINES`] lines unless a `// Long by design: <why>` comment stands
//! right above it (among its attributes and doc comment). A file or function that grows
//! past them is split, or says why it is one piece.

use std::{fs, path::Path};

use anyhow::Context;

/// Most lines in one Rust file.
const MAX_FILE_LINES: usize = 600;
/// Most lines in one function of the agent, from its `fn` line to its closing brace.
const MAX_FN_LINES: usize = 80;
/// What a function over [`MAX_FN_LINES`] carries above it, followed by the reason.
const LONG_BY_DESIGN: &str = "// Long by design:";

/// Where the rules apply, and whether to functions too (the agent's crates, not xtask).
const TREES: [(&str, bool); 6] = [
    ("agent/src", true),
    ("agent/tests", true),
    ("agent-client/src", true),
    ("agent-common/src", true),
    ("agent-ebpf/src", true),
    ("xtask/src", false),
];

/// Every file and function over the limits in the workspace at `root`, one line each.
pub fn violations(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    for (tree, functions_too) in TREES {
        let dir = root.join(tree);
        for file in crate::proc::rust_files(&dir)? {
            let source = fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            let shown = file.strip_prefix(root).unwrap_or(&file).display().to_string();
            let lines = source.lines().count();
            if lines > MAX_FILE_LINES {
                found.push(format!("{shown}: {lines} lines (at most {MAX_FILE_LINES})"));
            }
            if functions_too {
                found.extend(long_functions(&source).into_iter().map(|(name, at, n)| {
                    format!(
                        "{shown}:{at}: fn {name} is {n} lines (at most {MAX_FN_LINES}, or a `{LONG_BY_DESIGN}` comment \
                         above it)"
                    )
                }));
            }
        }
    }
    Ok(found)
}

/// The functions of `source` over [`MAX_FN_LINES`] without a [`LONG_BY_DESIGN`] comment:
/// each its name, first line (from 1) and length. Reads rustfmt's layout: a function ends
/// at the first line that is its `fn` line's indentation followed by `}`.
fn long_functions(source: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = source.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else { continue };
        if line.trim_end().ends_with(';') || line.trim_end().ends_with('}') {
            continue;
        }
        let indent = &line[..line.len() - line.trim_start().len()];
        let closing = format!("{indent}}}");
        let Some(end) = lines[i + 1..].iter().position(|l| l.trim_end() == closing) else { continue };
        let length = end + 2;
        if length > MAX_FN_LINES && !said_long(&lines[..i]) {
            found.push((name, i + 1, length));
        }
    }
    found
}

/// The function a line declares, if it declares one.
fn fn_name(line: &str) -> Option<String> {
    let mut words = line.split_whitespace().peekable();
    while let Some(word) = words.next() {
        match word {
            "fn" => {
                let name = words.next()?;
                return Some(name.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect());
            }
            "async" | "const" | "unsafe" | "extern" | "\"C\"" => {}
            w if w == "pub" || w.starts_with("pub(") => {}
            _ => return None,
        }
    }
    None
}

/// Whether the lines right above a function (its attributes, doc comment and comments)
/// hold a [`LONG_BY_DESIGN`] comment.
fn said_long(above: &[&str]) -> bool {
    above
        .iter()
        .rev()
        .map(|l| l.trim_start())
        .take_while(|l| l.starts_with("//") || l.starts_with("#["))
        .any(|l| l.starts_with(LONG_BY_DESIGN))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(name: &str, body_lines: usize, above: &str) -> String {
        let body: String = (0..body_lines).map(|i| format!("        let _x{i} = {i};\n")).collect();
        format!("{above}    pub(super) async fn {name}(&self) {{\n{body}    }}\n")
    }

    #[test]
    fn long_functions_are_found_unless_they_say_why() {
        let source = [
            "impl X {\n".to_owned(),
            function("short", MAX_FN_LINES - 2, ""),
            function("long", MAX_FN_LINES - 1, "    /// Does it.\n"),
            function("explained", 200, "    // Long by design: a table.\n    #[test]\n"),
            "    fn declared(&self);\n    fn one_line(&self) { }\n}\n".to_owned(),
        ]
        .concat();
        let found = long_functions(&source);
        assert_eq!(found, [("long".to_owned(), MAX_FN_LINES + 3, MAX_FN_LINES + 1)]);
    }

    #[test]
    fn only_declarations_are_functions() {
        assert_eq!(fn_name("pub(crate) const unsafe fn go<T>(x: T) {").as_deref(), Some("go"));
        assert_eq!(fn_name("    fn walk<'a>("), Some("walk".to_owned()));
        assert_eq!(fn_name("    let f = |x| x; // fn in a comment"), None);
        assert_eq!(fn_name("    type Workload = fn(u64);"), None);
    }
}

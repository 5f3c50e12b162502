//! The step table `cargo xtask test` ends with, kept in `target/test-steps.md`, and
//! `cargo xtask timings`, which copies the last one into docs/testing.md between its
//! markers: the docs' timings are a run's, never typed by hand.

use std::{fs, path::PathBuf};

use anyhow::{Context, bail};

use crate::proc::{cores, output, target_dir, workspace_root};

/// Where the docs keep the table.
const DOC: &str = "docs/testing.md";
const BEGIN: &str = "<!-- test-steps: written by `cargo xtask timings` from a run's table; do not edit -->";
const END: &str = "<!-- end of test-steps -->";

/// One step's outcome.
pub struct Row {
    pub name: String,
    pub passed: bool,
    pub seconds: f64,
}

impl Row {
    /// The summary's line on the console.
    pub fn console_line(&self) -> String {
        format!("{:<6} {:>7.1} s  {}", if self.passed { "ok" } else { "FAILED" }, self.seconds, self.name)
    }
}

fn table_file() -> PathBuf {
    target_dir().join("test-steps.md")
}

/// Writes the run's table (Markdown) and returns its path.
pub fn write(rows: &[Row], total_seconds: f64) -> anyhow::Result<PathBuf> {
    let kernel = output(std::process::Command::new("uname").arg("-r")).unwrap_or_default();
    let mut text = format!(
        "`cargo xtask test` on {} core(s), Linux {}: {} in {:.0} s ({:.0} min).\n\n| step | result | seconds |\n|---|---|---:|\n",
        cores(),
        kernel.trim(),
        if rows.iter().all(|r| r.passed) { "passed" } else { "FAILED" },
        total_seconds,
        total_seconds / 60.0,
    );
    for row in rows {
        text += &format!("| {} | {} | {:.0} |\n", row.name, if row.passed { "ok" } else { "FAILED" }, row.seconds);
    }
    let file = table_file();
    fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
    Ok(file)
}

/// `cargo xtask timings`: docs/testing.md's table becomes the last run's.
pub fn run() -> anyhow::Result<()> {
    let file = table_file();
    let table = fs::read_to_string(&file)
        .with_context(|| format!("reading {} (written by `cargo xtask test`)", file.display()))?;
    if table.contains("FAILED") {
        bail!("{} is a failed run's: the docs take a passing run's times", file.display());
    }
    let doc = workspace_root().join(DOC);
    let text = fs::read_to_string(&doc)?;
    let updated = replace_block(&text, &table).with_context(|| format!("{DOC} has no {BEGIN:?} ... {END:?} block"))?;
    fs::write(&doc, updated)?;
    println!("timings: {DOC} now shows {}", file.display());
    Ok(())
}

/// `text` with what lies between the markers replaced by `table`.
fn replace_block(text: &str, table: &str) -> Option<String> {
    let start = text.find(BEGIN)? + BEGIN.len();
    let end = start + text[start..].find(END)?;
    Some(format!("{}\n{}{}", &text[..start], table, &text[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_between_the_markers_is_replaced_and_the_rest_kept() {
        let doc = format!("intro\n{BEGIN}\nold table\n{END}\nafter\n");
        assert_eq!(replace_block(&doc, "new\n").unwrap(), format!("intro\n{BEGIN}\nnew\n{END}\nafter\n"));
        assert_eq!(replace_block("no markers", "new"), None);
    }
}

//! Check 6: the chart's dashboards/ are byte-equal copies of dashboards/*.json (`--write`
//! copies them).

use std::{collections::BTreeSet, fs, path::Path};

use super::{CHART, Outcome};
use crate::proc::json_files;

pub(super) fn dashboards_copied(root: &Path) -> Outcome {
    let names = |dir: &Path| -> Result<BTreeSet<String>, String> {
        Ok(json_files(dir)
            .map_err(|e| format!("{e:#}"))?
            .iter()
            .map(|p| p.file_name().expect("a file name").to_string_lossy().into_owned())
            .collect())
    };
    let source = root.join("dashboards");
    let copies = root.join(CHART).join("dashboards");
    let (want, have) = (names(&source)?, names(&copies)?);
    let mut problems = Vec::new();
    for missing in want.difference(&have) {
        problems.push(format!("{missing}: not in the chart"));
    }
    for extra in have.difference(&want) {
        problems.push(format!("{extra}: in the chart but not in dashboards/"));
    }
    for name in want.intersection(&have) {
        if fs::read(source.join(name)).ok() != fs::read(copies.join(name)).ok() {
            problems.push(format!("{name}: the chart's copy differs"));
        }
    }
    if problems.is_empty() {
        Ok(format!("{} dashboards, byte-equal", want.len()))
    } else {
        Err(format!("{}\n(run `cargo xtask check-deploy --write` to copy them)", problems.join("\n")))
    }
}

/// `--write`: replaces the chart's dashboard copies with dashboards/*.json.
pub(super) fn write(root: &Path) -> anyhow::Result<()> {
    let copies = root.join(CHART).join("dashboards");
    fs::create_dir_all(&copies)?;
    for entry in fs::read_dir(&copies)? {
        let path = entry?.path();
        if path.extension().is_some_and(|x| x == "json") {
            fs::remove_file(path)?;
        }
    }
    for source in json_files(&root.join("dashboards"))? {
        let name = source.file_name().expect("a file name");
        fs::copy(&source, copies.join(name))?;
        println!("deploy: copied dashboards/{} into the chart", name.to_string_lossy());
    }
    Ok(())
}

//! The real-node scenarios run one after another: each one's verdict and time, the
//! agents' state and logs after a failure, and a summary that names each failure's reason
//! (CI shows only the tail of a run) and fails the run if any failed.

use std::{fs, path::Path, time::Instant};

use anyhow::bail;

use super::{after_failure, kube::Kube, node::Node, workload::NS};

pub(super) struct Runner<'a> {
    admin: &'a Kube,
    logs: &'a Path,
    results: Vec<(String, anyhow::Result<String>)>,
    /// The nodes' and agent pods' state after the first failure: the summary repeats it,
    /// as failures after the first are often its consequences.
    first_failure: Option<Vec<String>>,
}

impl<'a> Runner<'a> {
    pub(super) fn new(admin: &'a Kube, logs: &'a Path) -> Self {
        Self { admin, logs, results: Vec::new(), first_failure: None }
    }

    /// Runs one scenario and records its verdict; after a failure, the nodes' readiness
    /// and each agent pod's state are printed, every agent's log is kept in
    /// `agent-after-scenario-<label>.log` (`1`, `6c`, `F3`: see [`label`]), and the pods
    /// the scenario made are deleted (a pod a failed scenario left, holding a volume,
    /// would fail the ones after it for a reason that is not theirs). Returns whether it
    /// passed.
    pub(super) fn scenario(&mut self, name: &str, run: impl FnOnce() -> anyhow::Result<String>) -> bool {
        println!("\n=== e2e scenario: {name}");
        let started = Instant::now();
        let pods_before = self.pods();
        let result = run();
        match &result {
            Ok(summary) => println!("=== ok ({:.1} s): {summary}", started.elapsed().as_secs_f64()),
            Err(e) => {
                println!("=== FAILED ({:.1} s): {e:#}", started.elapsed().as_secs_f64());
                let account = after_failure::take(self.admin);
                for line in &account.summary {
                    println!("===   {line}");
                }
                let file = self.logs.join(format!("agent-after-scenario-{}.log", label(name)));
                let _ = fs::write(&file, account.whole);
                self.first_failure.get_or_insert(account.summary);
                println!("=== the agents' logs: {}", file.display());
                self.delete_pods_made_since(&pods_before);
            }
        }
        let passed = result.is_ok();
        self.results.push((name.to_owned(), result));
        passed
    }

    /// The scenarios' pods (namespace `NS`) by name; none where the namespace is not there yet.
    fn pods(&self) -> Vec<String> {
        self.admin
            .run(&["get", "pods", "-n", NS, "-o", "jsonpath={.items[*].metadata.name}"])
            .map(|names| names.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    fn delete_pods_made_since(&self, before: &[String]) {
        let made: Vec<String> = self.pods().into_iter().filter(|p| !before.contains(p)).collect();
        if made.is_empty() {
            return;
        }
        println!("=== deleting the pods the failed scenario made: {}", made.join(", "));
        let mut args = vec!["delete", "pod", "-n", NS, "--wait=true", "--timeout=180s"];
        args.extend(made.iter().map(String::as_str));
        if let Err(e) = self.admin.run(&args) {
            println!("=== could not delete them: {e:#}");
        }
    }

    /// The summary; fails if a scenario failed, with the last lines of `components`' logs.
    pub(super) fn finish(self, node: &Node, components: &[&str]) -> anyhow::Result<()> {
        println!("\n=== e2e summary");
        for (name, result) in &self.results {
            match result {
                Ok(_) => println!("ok     {name}"),
                Err(e) => println!("FAILED {name}\n         {}", first_line(e)),
            }
        }
        let failed = self.results.iter().filter(|(_, r)| r.is_err()).count();
        println!("e2e: {} passed, {failed} failed", self.results.len() - failed);
        if let Some(state) = &self.first_failure {
            println!("after the first failure:");
            for line in state {
                println!("  {line}");
            }
        }
        if failed > 0 {
            for component in components {
                println!("--- last lines of {component}'s log ---\n{}", node.log_tail(component, 15));
            }
            bail!("{failed} e2e scenario(s) failed");
        }
        Ok(())
    }
}

/// A failure's reason on one line, cut to what a summary line can hold.
fn first_line(error: &anyhow::Error) -> String {
    let reason = format!("{error:#}");
    let line = reason.lines().next().unwrap_or_default();
    match line.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    }
}

/// A scenario's label, the part of its heading before the first `.` ("6c. reads with no
/// mount …" → "6c"), so that a failure's log file names the scenario that failed; a
/// heading without one is used whole, its spaces made dashes.
fn label(name: &str) -> String {
    let label = name.split_once('.').map_or(name, |(label, _)| label);
    label.trim().replace(' ', "-")
}

#[cfg(test)]
mod tests {
    use super::label;

    #[test]
    fn a_failures_log_file_is_named_by_the_scenarios_label() {
        assert_eq!(label("1. a second pod asks for a single-pod volume another pod uses"), "1");
        assert_eq!(label("6c. reads with no mount: /proc/<pid>/root"), "6c");
        assert_eq!(label("F3. a ReadWriteOncePod claim wanted on two nodes"), "F3");
        assert_eq!(label("storage suite"), "storage-suite");
    }
}

//! kubectl and helm against the node's API server, and waiting for what they report.

use std::{
    path::{Path, PathBuf},
    process::Command,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use serde_json::Value;

use super::components::bin;
use crate::proc::output;

pub struct Kube {
    pub kubeconfig: PathBuf,
}

impl Kube {
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(bin("kubectl"));
        cmd.arg("--kubeconfig").arg(&self.kubeconfig);
        cmd
    }

    /// Runs kubectl and returns its stdout; fails with its stderr.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        output(self.kubectl().args(args))
    }

    /// Applies a manifest given as text.
    pub fn apply(&self, manifest: &str) -> anyhow::Result<()> {
        let file = tempfile_with(manifest)?;
        self.run(&["apply", "-f", file.to_str().expect("UTF-8 path")])?;
        let _ = std::fs::remove_file(file);
        Ok(())
    }

    /// `kubectl get ... -o json`, parsed.
    pub fn get_json(&self, args: &[&str]) -> anyhow::Result<Value> {
        let mut all = vec!["get"];
        all.extend(args);
        all.extend(["-o", "json"]);
        let text = self.run(&all)?;
        serde_json::from_str(&text).with_context(|| format!("kubectl {} printed no JSON", all.join(" ")))
    }

    /// The phase of a pod, or None if it does not exist.
    pub fn pod_phase(&self, namespace: &str, name: &str) -> Option<String> {
        let pod = self.get_json(&["pod", "-n", namespace, name]).ok()?;
        pod["status"]["phase"].as_str().map(str::to_owned)
    }

    pub fn wait_pod_running(&self, namespace: &str, name: &str, timeout: Duration) -> anyhow::Result<Duration> {
        wait_for(&format!("pod {namespace}/{name} Running"), timeout, || {
            Ok(self.pod_phase(namespace, name).as_deref() == Some("Running")
                && self.get_json(&["pod", "-n", namespace, name])?["status"]["containerStatuses"]
                    .as_array()
                    .is_some_and(|c| c.iter().all(|c| c["ready"] == true)))
        })
    }

    /// The `events.k8s.io` Events about one object of `namespace`.
    pub fn events_for(&self, namespace: &str, name: &str) -> anyhow::Result<Vec<Event>> {
        let list = self.get_json(&[
            "events.v1.events.k8s.io",
            "-n",
            namespace,
            "--field-selector",
            &format!("regarding.name={name}"),
        ])?;
        Ok(list["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|e| Event {
                        reason: e["reason"].as_str().unwrap_or_default().to_owned(),
                        kind: e["type"].as_str().unwrap_or_default().to_owned(),
                        note: e["note"].as_str().unwrap_or_default().to_owned(),
                        controller: e["reportingController"].as_str().unwrap_or_default().to_owned(),
                        instance: e["reportingInstance"].as_str().unwrap_or_default().to_owned(),
                    })
                    .collect()
            })
            .unwrap_or_default())
    }
}

#[derive(Debug)]
pub struct Event {
    pub reason: String,
    pub kind: String,
    pub note: String,
    pub controller: String,
    /// Which instance of the controller reported it: volguard's agents write their node.
    pub instance: String,
}

fn tempfile_with(text: &str) -> anyhow::Result<PathBuf> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let path = std::env::temp_dir().join(format!(
        "volguard-e2e-{}-{}.yaml",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, text)?;
    Ok(path)
}

/// Polls `check` every 500 ms until it says true; fails after `timeout` naming `what`.
/// An error of `check` counts as "not yet" (an API server still starting refuses
/// connections), except [`ProcessExited`]: nothing can come after a component died, so
/// the wait ends at once. Returns how long it took.
pub fn wait_for(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut last_error = None;
    loop {
        match check() {
            Ok(true) => return Ok(started.elapsed()),
            Ok(false) => {}
            Err(e) if e.is::<ProcessExited>() => return Err(e.context(format!("waiting for {what}"))),
            Err(e) => last_error = Some(e),
        }
        if started.elapsed() > timeout {
            match last_error {
                Some(e) => bail!("timed out after {timeout:?} waiting for {what} (last error: {e:#})"),
                None => bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        thread::sleep(Duration::from_millis(500));
    }
}

/// A process the node started has exited.
#[derive(Debug, thiserror::Error)]
#[error("{name} exited ({status}); its log: {log}")]
pub struct ProcessExited {
    pub name: String,
    pub status: std::process::ExitStatus,
    pub log: PathBuf,
}

/// The helm binary that `cargo xtask setup` unpacked (upstream helm, see deploy.rs).
pub fn helm(kubeconfig: &Path) -> Command {
    let mut cmd = Command::new(crate::deploy::helm_binary());
    cmd.env("KUBECONFIG", kubeconfig).current_dir(crate::proc::workspace_root());
    cmd
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    #[test]
    fn a_dead_component_ends_the_wait_at_once_and_other_errors_are_retried() {
        let died =
            || ProcessExited { name: "kubelet".into(), status: ExitStatusExt::from_raw(256), log: "k.log".into() };
        let mut checks = 0;
        let err = wait_for("the node Ready", Duration::from_secs(600), || {
            checks += 1;
            Err(died().into())
        })
        .unwrap_err();
        assert_eq!(checks, 1, "no retry after a component died");
        let message = format!("{err:#}");
        assert!(message.contains("waiting for the node Ready") && message.contains("kubelet exited"), "{message}");

        let mut checks = 0;
        let took = wait_for("the API server", Duration::from_secs(600), || {
            checks += 1;
            if checks < 2 { Err(anyhow::anyhow!("connection refused")) } else { Ok(true) }
        });
        assert!(took.is_ok() && checks == 2, "an ordinary error is \"not yet\"");
    }
}

//! What an agent's ready line says: its mode, how it refuses in the kernel, its tracing
//! backend.

use super::kubelet::Agent;

impl Agent {
    /// The value of `field=` in the ready line.
    fn ready_field(&self, field: &str) -> String {
        let ready = self.wait_for_line("ready", |l| l.starts_with(volguard::agent::READY));
        let value = ready.split(&format!("{field}=")).nth(1).and_then(|m| m.split_whitespace().next());
        value.unwrap_or_default().to_owned()
    }

    /// The mode named in the ready line.
    pub fn mode(&self) -> String {
        self.ready_field("mode")
    }

    /// How the agent refuses in the kernel (`bpf_lsm`, `fmod_ret`, or `none`).
    pub fn security_hooks(&self) -> String {
        self.ready_field("security-hooks")
    }

    /// The mode, and how it refuses in the kernel where it does: `enforce (fmod_ret)`,
    /// `quarantine`: what a benchmark row names.
    pub fn mode_and_security_hooks(&self) -> String {
        match (self.mode(), self.security_hooks()) {
            (mode, hooks) if hooks == "none" => mode,
            (mode, hooks) => format!("{mode} ({hooks})"),
        }
    }

    /// The tracing backend named in the ready line.
    pub fn trace_backend(&self) -> String {
        self.ready_field("trace-backend")
    }
}

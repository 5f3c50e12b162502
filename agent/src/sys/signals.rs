//! SIGINT and SIGTERM, installed up front: a signal that arrives after the agent says it is
//! ready must stop it cleanly, never by the default action.

use tokio::signal::unix::{Signal, SignalKind, signal};

/// Both stop signals, registered when created.
pub struct StopSignals {
    interrupt: Signal,
    terminate: Signal,
}

impl StopSignals {
    /// Registers the handlers now (needs a tokio runtime).
    pub fn install() -> std::io::Result<Self> {
        Ok(Self { interrupt: signal(SignalKind::interrupt())?, terminate: signal(SignalKind::terminate())? })
    }

    /// Waits for either signal.
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

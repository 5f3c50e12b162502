//! The commands for a person on the node (besides `run`): the debug API as tables
//! (`status`, `volumes`, ...) and `check` (the CSI checks once); and `client`, the GET
//! every caller of the agent's HTTP listeners uses.

pub mod check;
pub mod views;

pub use volguard_client as client;

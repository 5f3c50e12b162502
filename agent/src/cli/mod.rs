//! The commands for a person on the node (besides `run`): the debug API as tables
//! (`status`, `volumes`, ...) and `check` (the CSI checks once).

pub mod check;
pub mod views;

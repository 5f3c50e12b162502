//! volguard's userspace agent: loads the eBPF programs, decodes what they report, and
//! (in later layers) keeps the node model, enforcement state, metrics and debug API.

pub mod bpf;
pub mod decode;
pub mod flags;
pub mod lsm_probe;
pub mod mountns;
pub mod render;

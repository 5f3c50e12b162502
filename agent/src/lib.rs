//! volguard's userspace agent: loads the eBPF programs, decodes what they report, and
//! (in later layers) keeps the node model, enforcement state, metrics and debug API.

pub mod agent;
pub mod bpf;
pub mod btf;
pub mod cgroup;
pub mod checks;
pub mod cli;
pub mod csi;
pub mod debug;
pub mod decode;
pub mod demo;
pub mod enforce;
pub mod explain;
pub mod facts;
pub mod flags;
pub mod http;
pub mod inventory;
pub mod k8s;
pub mod kubelet;
pub mod lsm_probe;
pub mod metrics;
pub mod mount_table;
pub mod mountns;
pub mod node;
pub mod render;
pub mod signals;
pub mod state;
pub mod voldata;
pub mod volume_ops;

//! Readers of what is on the node's disk and in /proc: kubelet's directory layout and its
//! `vol_data.json`, the mount table, cgroup paths, and the pod a
//! calling process belongs to. Pure parsers of strings and files;
//! what they mean for volumes and owners is the node model's business (`crate::model`).

pub mod caller_pod;
pub mod cgroup;
pub mod kubelet;
pub mod mount_table;
pub mod vol_data;

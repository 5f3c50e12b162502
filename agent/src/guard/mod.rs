//! The guard of an owned volume's files where no kernel hook refuses (quarantine, and
//! audit without BPF LSM): the reporters of other pods' opens (`open_reporter`, refusing
//! with `--deny-foreign-open`) and changes (`change_reporter`), what they hand the loop
//! (`foreign_access`), who each process is (`reader_pods`), the mounts above a volume
//! whose opens are judged file by file (`ancestor_mounts`), and node processes' opens
//! counted (`node_opens`). The kernel half (BPF LSM or fmod_ret programs) is in
//! `agent-ebpf/src/probes/` and loaded by `crate::kernel`.

pub mod ancestor_mounts;
pub mod change_reporter;
pub mod foreign_access;
pub mod node_opens;
pub mod open_reporter;
pub mod reader_pods;

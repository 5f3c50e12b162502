//! The kernel boundary: the only folder that imports aya. The embedded object, loading
//! and attaching, pins, the maps the LSM programs decide from, reading and decoding the
//! ring buffer, the kernel's counters, and the probes of what the running kernel allows
//! (the floor, BTF offsets, whether BPF LSM really runs, whether trampolines are allowed), and what
//! the programs cost (run-time statistics).

pub mod btf;
pub mod counters;
pub mod decode;
pub mod flags;
pub mod floor;
pub mod loader;
pub mod lsm_probe;
pub mod maps;
pub mod pins;
pub mod program_stats;
pub mod reader;
pub mod skipped_runs;
pub mod trace_backend;
pub mod wakeup;

/// The eBPF object built by build.rs from ../agent-ebpf, embedded in the binary.
pub static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/volguard.bpf.o"));

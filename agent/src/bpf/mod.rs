//! Everything that touches `aya::Ebpf`: the embedded object, loading and attaching,
//! reading the ring buffer, and the kernel's counters.

pub mod counters;
pub mod loader;
pub mod reader;

/// The eBPF object built by build.rs from ../agent-ebpf, embedded in the binary.
pub static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/volguard.bpf.o"));

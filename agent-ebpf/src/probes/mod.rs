//! One module per hook family.

mod lsm_probe;
mod syscalls;

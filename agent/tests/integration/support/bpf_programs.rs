//! The kernel's own account of loaded BPF programs, read with bpf(2): for the tests that
//! must tell a call the kernel skipped from one a program let through. An fmod_ret program
//! is a tracing program: the kernel runs at most one instance of it per CPU, and a call
//! that arrives while it is already running there (preempted mid-run) skips it and counts
//! a recursion miss. BPF LSM programs are never skipped.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// bpf(2) commands (include/uapi/linux/bpf.h).
const BPF_PROG_GET_NEXT_ID: libc::c_long = 11;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
/// `enum bpf_prog_type`: fentry, fexit and fmod_ret programs.
pub const BPF_PROG_TYPE_TRACING: u32 = 26;
/// `struct bpf_prog_info`'s size up to `attach_btf_id`, and the fields read here, by byte
/// offset (the layout is the kernel's ABI).
const INFO_LEN: usize = 232;
const ID_AT: usize = 4;
const NAME_AT: usize = 64;
const RECURSION_MISSES_AT: usize = 208;

/// A loaded program, held open: a program held stays loaded, with its counters, after
/// its link is gone.
pub struct LoadedProgram {
    fd: OwnedFd,
    pub id: u32,
}

impl LoadedProgram {
    /// Calls that skipped this program because it was already running on their CPU.
    pub fn recursion_misses(&self) -> u64 {
        let info = info(&self.fd).expect("the info of a program held open");
        u64::from_ne_bytes(info[RECURSION_MISSES_AT..RECURSION_MISSES_AT + 8].try_into().unwrap())
    }
}

/// One bpf(2) call with `attr` (a zeroed `union bpf_attr` with its first fields set).
fn bpf(command: libc::c_long, attr: &mut [u8; 128]) -> std::io::Result<libc::c_long> {
    // SAFETY: `attr` is valid for reads and writes of its size for the call.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, command, attr.as_mut_ptr(), attr.len()) };
    if rc < 0 { Err(std::io::Error::last_os_error()) } else { Ok(rc) }
}

fn info(fd: &OwnedFd) -> std::io::Result<[u8; INFO_LEN]> {
    let mut info = [0u8; INFO_LEN];
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&(fd.as_raw_fd() as u32).to_ne_bytes());
    attr[4..8].copy_from_slice(&(INFO_LEN as u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&(info.as_mut_ptr() as u64).to_ne_bytes());
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    Ok(info)
}

/// Every loaded program of `kind` whose (kernel-truncated, 15-byte) name is `name`'s start.
pub fn loaded_programs(kind: u32, name: &str) -> Vec<LoadedProgram> {
    let wanted = &name.as_bytes()[..name.len().min(15)];
    let mut found = Vec::new();
    let mut id = 0u32;
    loop {
        let mut attr = [0u8; 128];
        attr[0..4].copy_from_slice(&id.to_ne_bytes());
        if bpf(BPF_PROG_GET_NEXT_ID, &mut attr).is_err() {
            return found; // ENOENT: the last one
        }
        id = u32::from_ne_bytes(attr[4..8].try_into().unwrap());
        let mut attr = [0u8; 128];
        attr[0..4].copy_from_slice(&id.to_ne_bytes());
        let Ok(fd) = bpf(BPF_PROG_GET_FD_BY_ID, &mut attr) else { continue }; // gone meanwhile
        // SAFETY: a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let Ok(info) = info(&fd) else { continue };
        let program_kind = u32::from_ne_bytes(info[0..4].try_into().unwrap());
        let program_name = &info[NAME_AT..NAME_AT + 16];
        if program_kind == kind && program_name.starts_with(wanted) {
            let id = u32::from_ne_bytes(info[ID_AT..ID_AT + 4].try_into().unwrap());
            found.push(LoadedProgram { fd, id });
        }
    }
}

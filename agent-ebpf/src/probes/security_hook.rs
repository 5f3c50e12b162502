//! One decision, two ways into the kernel. Each enforcement program is built twice from the
//! same body: as a BPF LSM program on the hook (`lsm/<hook>`, where `bpf` is in the
//! kernel's `lsm=` list) and as an fmod_ret program on the kernel's `security_<hook>`
//! function (`fmod_ret/security_<hook>`, wherever BPF trampolines load). Both receive the
//! hook's arguments followed by the verdict so far, and what they return is what the
//! caller gets (a non-zero fmod_ret return skips `security_<hook>` itself). The twin's name
//! is the LSM program's with `volguard_common::programs::FMOD_RET_SUFFIX`.

/// `security_hook!("sb_mount", sb_mount_enforce, sb_mount_enforce_fmod_ret, body)`: the two
/// programs of `body`, a `fn(LsmContext) -> i32` (inlined into each).
macro_rules! security_hook {
    ($hook:literal, $lsm:ident, $fmod_ret:ident, $body:path) => {
        #[unsafe(no_mangle)]
        #[unsafe(link_section = concat!("lsm/", $hook))]
        pub fn $lsm(ctx: *mut ::core::ffi::c_void) -> i32 {
            $body(::aya_ebpf::programs::LsmContext::new(ctx))
        }

        #[unsafe(no_mangle)]
        #[unsafe(link_section = concat!("fmod_ret/security_", $hook))]
        pub fn $fmod_ret(ctx: *mut ::core::ffi::c_void) -> i32 {
            $body(::aya_ebpf::programs::LsmContext::new(ctx))
        }
    };
}


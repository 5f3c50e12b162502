//! volguard's kernel side: programs capture fixed-size facts and hand them to userspace;
//! only LSM hooks decide, and only from maps userspace fills.
#![no_std]
#![no_main]

mod helpers;
mod maps;
mod probes;
mod task_storage;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// LSM and tracing helpers require a GPL-compatible licence.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";

//! The ring-buffer record decoder: any bytes give a record or a DecodeError, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use volguard::{kernel::decode, outputs::render};

fuzz_target!(|record: &[u8]| {
    match decode::parse(record) {
        // The line `volguard trace` prints for it must not panic either.
        Ok(record) => drop(render::record(&record)),
        Err(error) => drop(error.to_string()),
    }
});

//! The inventory file parser: any text gives facts or an error naming the line and field.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let text = String::from_utf8_lossy(bytes);
    if let Err(error) = volguard::facts::inventory::parse(Path::new("fuzz.yaml"), &text) {
        let _ = error.to_string();
    }
});

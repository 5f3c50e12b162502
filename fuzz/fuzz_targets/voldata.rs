//! kubelet's vol_data.json parser: any bytes give the data or a VolDataError.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    if let Err(error) = volguard::node_files::vol_data::parse(bytes) {
        // The error is logged by the tree scan: rendering it must not panic.
        let _ = error.to_string();
    }
});

//! The mount-table parser: every non-empty line becomes a mount or a counted skip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use volguard::node_files::mount_table::MountTable;

fuzz_target!(|text: &[u8]| {
    let table = MountTable::parse(text);
    let lines = text.split(|&b| b == b'\n').filter(|l| !l.is_empty()).count();
    assert_eq!(table.mounts.len() + table.skipped.len(), lines, "a line was lost");
});

//! libFuzzer entry of the request handling target (`make fuzz`): one daemon's stores for
//! the whole run, opened on first use.
#![no_main]

use std::sync::Mutex;

static TARGET: Mutex<Option<eddy_fuzz::Requests>> = Mutex::new(None);

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut guard = TARGET.lock().unwrap_or_else(|e| e.into_inner());
    guard
        .get_or_insert_with(|| {
            eddy_fuzz::Requests::open().expect("open the fuzzed daemon's stores")
        })
        .run(data);
});

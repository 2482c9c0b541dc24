//! libFuzzer entry of the request handling target (`make fuzz`): one daemon's stores for
//! the whole run, opened on first use.
#![no_main]

use eddy_proto::sync::lock;
use std::sync::Mutex;

static TARGET: Mutex<Option<eddy_fuzz::Requests>> = Mutex::new(None);

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut guard = lock(&TARGET);
    guard
        .get_or_insert_with(|| {
            eddy_fuzz::Requests::open().expect("open the fuzzed daemon's stores")
        })
        .run(data);
});

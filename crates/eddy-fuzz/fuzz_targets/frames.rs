//! libFuzzer entry of the frame and message decoding target (`make fuzz`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| eddy_fuzz::frames(data));

//! `metaclaw_fuzz_bodies::config` under libFuzzer (see that crate, fuzz/bodies).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| metaclaw_fuzz_bodies::config(data));

//! `metaclaw::dev::fuzz::skill_md` under libFuzzer (see that module).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| metaclaw::dev::fuzz::skill_md(data));

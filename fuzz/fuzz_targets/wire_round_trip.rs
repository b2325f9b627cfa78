//! Messages built from fuzz bytes survive encode → decode → encode. The checks are in
//! `parma_core::fuzzing::wire_round_trip`.
#![no_main]
#![forbid(unsafe_code)]

libfuzzer_sys::fuzz_target!(|data: &[u8]| parma_core::fuzzing::wire_round_trip(data));

//! Untrusted bytes as a frame: decoding never panics, and what decodes re-encodes to the same
//! bytes. The checks are in `parma_core::fuzzing::wire_decode`.
#![no_main]
#![forbid(unsafe_code)]

libfuzzer_sys::fuzz_target!(|data: &[u8]| parma_core::fuzzing::wire_decode(data));

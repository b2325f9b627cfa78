//! Two sessions over a medium that loses, doubles and cuts, fed arbitrary operations: frames
//! arrive once and in order, bounds hold. The checks are in `parma_core::fuzzing::session_ops`.
#![no_main]
#![forbid(unsafe_code)]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = parma_core::fuzzing::session_ops(data);
});

//! One node fed arbitrary frames, worker commands, timers and peer failures, with partial or
//! full drains: invariants and bounds hold after every input. The checks are in
//! `parma_core::fuzzing::node_ops`.
#![no_main]
#![forbid(unsafe_code)]

libfuzzer_sys::fuzz_target!(|data: &[u8]| parma_core::fuzzing::node_ops(data));

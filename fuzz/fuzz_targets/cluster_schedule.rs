//! A small cluster driven by an arbitrary schedule of deliveries, worker operations and clock
//! advances, then healed: invariants after every step, exact outcomes at the end. The checks
//! are in `parma_core::fuzzing::cluster_schedule`.
#![no_main]
#![forbid(unsafe_code)]

libfuzzer_sys::fuzz_target!(|data: &[u8]| parma_core::fuzzing::cluster_schedule(data));

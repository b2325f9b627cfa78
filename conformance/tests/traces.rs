//! Every conformance trace on the simulated network (32 fault seeds) and on the threaded
//! in-process transport through the runtime, each with its shipped skip list. (Over ZeroMQ in
//! one process: `cli/tests/conformance_zmq.rs`, as this crate names no transport.)
//! `PARMA_REWRITE=1` regenerates expected outputs (review the diff before committing).
#![forbid(unsafe_code)]

use parma_conformance::suite::{all_passed, default_dir, run_transport, table, trace_files};

fn check(transport: &str, seeds: std::ops::Range<u64>) {
    let rewrite = std::env::var("PARMA_REWRITE").is_ok_and(|v| v == "1");
    let dir = default_dir();
    assert!(trace_files(&dir).unwrap().len() >= 8, "expected the conformance traces in {dir:?}");
    let results = run_transport(transport, &dir, seeds, rewrite).unwrap();
    assert!(all_passed(&results), "{}", table(transport, &results));
}

#[test]
fn traces_on_simulated_network() {
    check("sim", 0..32);
}

#[test]
fn traces_on_threaded_transport() {
    for _ in 0..3 {
        check("threaded", 0..1);
    }
}

#[test]
fn traces_on_threaded_transport_with_back_pressure() {
    // One frame per pair in flight: every send meets back-pressure.
    check("threaded-1frame", 0..1);
}

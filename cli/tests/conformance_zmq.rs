//! Every conformance trace over ZeroMQ with every node in this process, with the shipped `zmq`
//! skip list (moved here from `conformance/tests/traces.rs`: parma-conformance names no
//! transport). `PARMA_REWRITE=1` regenerates expected outputs (review the diff before
//! committing).
#![forbid(unsafe_code)]

use parma_cli::conformance_zmq::run_transport;
use parma_conformance::suite::{all_passed, default_dir, table, trace_files};

fn check(transport: &str, seeds: std::ops::Range<u64>) {
    let rewrite = std::env::var("PARMA_REWRITE").is_ok_and(|v| v == "1");
    let dir = default_dir();
    assert!(trace_files(&dir).unwrap().len() >= 8, "expected the conformance traces in {dir:?}");
    let results = run_transport(transport, &dir, seeds, rewrite).unwrap();
    assert!(all_passed(&results), "{}", table(transport, &results));
}

#[test]
fn traces_on_zeromq_in_one_process() {
    // Every node's transport on 127.0.0.1 in this process: real TCP connections, sessions,
    // handshakes; a `kill` stops a node's sockets without a goodbye.
    check("zmq", 0..1);
}

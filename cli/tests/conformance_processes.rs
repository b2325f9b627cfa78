//! Every conformance trace with one process per node: the suite starts a `parma
//! conformance-agent` per node of each trace's cluster, on 127.0.0.1 over ZeroMQ, and a
//! `kill` is a SIGKILL. The shipped `zmq-processes` skip list applies.
#![forbid(unsafe_code)]

use std::time::Instant;

use parma_conformance::process::AgentCommand;
use parma_conformance::suite::{all_passed, default_dir, run_processes, table, trace_files};

#[test]
fn traces_on_zeromq_one_process_per_node() {
    let rewrite = std::env::var("PARMA_REWRITE").is_ok_and(|v| v == "1");
    let dir = default_dir();
    assert!(trace_files(&dir).unwrap().len() >= 8, "expected the conformance traces in {dir:?}");
    let started = Instant::now();
    let results = run_processes(&dir, &AgentCommand::parma(env!("CARGO_BIN_EXE_parma")), rewrite).unwrap();
    let report = table("zmq-processes", &results);
    assert!(all_passed(&results), "{report}");
    println!("{report}\n{} traces in {:.1} s", results.len(), started.elapsed().as_secs_f64());
}

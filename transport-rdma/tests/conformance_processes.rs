//! The conformance suite's traces over RDMA with one process per node: each node is a
//! `parma conformance-agent --transport rdma` process (from `PARMA_BIN`, built with
//! `--features rdma`), started as the `zmq-processes` transport starts its agents (rank,
//! world, rendezvous and a fresh token in its environment; a `kill` is a SIGKILL). No trace
//! is skipped. Without `PARMA_BIN` the test fails saying so: it is never passed silently.

use parma_conformance::process::{AgentCommand, ProcessExecutor};
use parma_conformance::suite::{all_passed, default_dir, run_suite, table};
use parma_conformance::trace::{Executor, Setup};

#[test]
fn every_conformance_trace_passes_over_rdma_with_one_process_per_node() {
    let program = std::env::var("PARMA_BIN").unwrap_or_else(|_| {
        panic!("set PARMA_BIN to a parma built with --features rdma (cargo build --release -p parma-cli --features rdma)")
    });
    let agent = AgentCommand {
        program: program.into(),
        args: vec!["conformance-agent".into(), "--transport".into(), "rdma".into()],
    };
    let mut make =
        |s: &Setup| -> Result<Box<dyn Executor>, String> { Ok(Box::new(ProcessExecutor::start(s, &agent)?)) };
    let results = run_suite(&default_dir(), &[], &mut make, false).expect("the traces");
    let t = table("rdma-processes", &results);
    println!("{t}");
    assert!(all_passed(&results), "{t}");
}

//! How to run the conformance suite on a transport of your own.
//!
//! Replace `endpoints` with a function that builds one connected endpoint of your transport
//! per node (`endpoints[i]` is node `i`). Here the threaded in-process transport stands in.
//!
//! `cargo run --release -p parma-conformance --example own_transport -- [skip list file]`
#![forbid(unsafe_code)]

use parma_conformance::suite::{all_passed, default_dir, parse_skip_list, run_suite, table};
use parma_conformance::trace::{Executor, RuntimeExecutor, Setup};
use parma_transport_loopback::threaded::{cluster, ThreadedOptions, ThreadedTransport};

/// One endpoint per node, all connected to each other.
fn endpoints(nodes: u16) -> Vec<ThreadedTransport> {
    cluster(nodes, ThreadedOptions::default())
}

fn main() -> std::process::ExitCode {
    // The skip list: `<trace name>: <reason>` per line.
    let skips = match std::env::args().nth(1) {
        Some(path) => {
            let text = std::fs::read_to_string(&path).expect("read the skip list");
            parse_skip_list(&text).expect("a valid skip list")
        }
        None => Vec::new(),
    };
    // Each trace starts a fresh cluster: one runtime per endpoint, driven through real
    // `Worker` handles. `with_kill` lets the `kill` command stop a node as a crash would; a
    // transport that cannot leaves it out and skips the `failed_peer*` traces.
    let mut make = |s: &Setup| -> Result<Box<dyn Executor>, String> {
        let ends = endpoints(s.nodes);
        let control = ends.first().map(|e| e.controller()).ok_or("a cluster without nodes")?;
        Ok(Box::new(RuntimeExecutor::new(s, ends)?.with_kill(move |n| control.kill(n))))
    };
    let results = run_suite(&default_dir(), &skips, &mut make, false).expect("run the suite");
    println!("{}", table("my-transport", &results));
    if all_passed(&results) {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}

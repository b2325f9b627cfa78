//! The conformance suite's traces over RDMA, every node's transport in this process on the
//! RDMA device (in CI: the VM's Soft-RoCE `rxe0`), with the timers of the suite's ZeroMQ runs
//! (a `kill` is noticed within about a second). No trace is skipped.

use std::sync::Arc;
use std::time::Duration;

use parma_conformance::suite::{all_passed, default_dir, run_suite, table};
use parma_conformance::trace::{Executor, RuntimeExecutor, Setup};
use parma_runtime::startup::ClusterToken;
use parma_transport_rdma::{local_cluster, RdmaOptions};

fn options() -> RdmaOptions {
    let mut o = RdmaOptions::loopback();
    o.heartbeat_interval = Duration::from_millis(100);
    o.peer_timeout = Duration::from_millis(1000);
    o.linger = Duration::from_millis(500);
    // Small rings: a trace's clusters are many and short-lived.
    o.slot_len = 16 << 10;
    o.recv_slots = 32;
    o.send_slots = 64;
    o.ring_len = 256 << 10;
    o.ring_msgs = 256;
    o
}

#[test]
fn every_conformance_trace_passes_over_rdma() {
    let mut make = |s: &Setup| -> Result<Box<dyn Executor>, String> {
        let digest = parma_core::cluster_digest(&s.config(), 0, None);
        let ends = local_cluster(s.nodes, &options(), digest, Arc::new(ClusterToken::generate()))
            .map_err(|e| e.to_string())?;
        let switches: Vec<_> = ends.iter().map(|e| e.kill_switch()).collect();
        let exec = RuntimeExecutor::new(s, ends)?;
        Ok(Box::new(exec.with_kill(move |n| {
            if let Some(k) = switches.get(n.index()) {
                k.kill();
            }
        })))
    };
    let results = run_suite(&default_dir(), &[], &mut make, false).expect("the traces");
    let t = table("rdma", &results);
    println!("{t}");
    assert!(all_passed(&results), "{t}");
}

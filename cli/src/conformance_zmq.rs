//! Clusters over ZeroMQ for the suite: every node's transport on 127.0.0.1 in this process
//! (the suite's `zmq` transport, [`run_transport`]), and the agent's node of `zmq-processes`
//! ([`start_agent_node`], `parma conformance-agent`). Here rather than in parma-conformance,
//! which names no transport.

use std::sync::Arc;

use parma_core::time::Duration;
use parma_runtime::startup::ClusterToken;
use parma_transport_zmq::{local_cluster, ZmqOptions, ZmqTransport};

use parma_conformance::trace::Setup;

mod runs;

pub use runs::{run_transport, run_zmq, start_agent_node};

/// Timers short enough that a `kill` is noticed within about a second.
pub fn options() -> ZmqOptions {
    let mut o = ZmqOptions::loopback();
    o.session.heartbeat_interval = Duration::from_millis(100);
    o.session.peer_timeout = Duration::from_millis(1000);
    o.session.retransmit_timeout = Duration::from_millis(200);
    o.session.handshake_timeout = Duration::from_millis(500);
    o.linger = std::time::Duration::from_millis(500);
    o
}

/// The transports of a fresh cluster for `setup`.
pub fn cluster(setup: &Setup) -> Result<Vec<ZmqTransport>, String> {
    let digest = parma_core::cluster_digest(&setup.config(), 0, None);
    local_cluster(setup.nodes, &options(), digest, Arc::new(ClusterToken::generate()))
        .map_err(|e| e.to_string())
}

//! Clusters over ZeroMQ for the suite: every node's transport on 127.0.0.1 in this process.

use std::sync::Arc;

use parma_core::session::Token;
use parma_core::time::Duration;
use parma_core::NodeId;
use parma_transport_zmq::{local_cluster, ZmqOptions, ZmqTransport};

use crate::trace::Setup;

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
    let digest = u64::from(setup.config().wire_cluster().0);
    local_cluster(setup.nodes, &options(), digest, Arc::new(RunToken(rand_key()))).map_err(|e| e.to_string())
}

fn rand_key() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id().into());
    h.finish()
}

/// TEMPORARY until the start-up's cluster token lands.
struct RunToken(u64);

impl Token for RunToken {
    fn prove(&self, nonce: u64, prover: NodeId, verifier: NodeId, digest: u64) -> [u8; 32] {
        let mut h = self.0 ^ nonce.rotate_left(17) ^ digest.rotate_left(33);
        h ^= (u64::from(prover.0) << 16) | u64::from(verifier.0);
        let mut out = [0; 32];
        for chunk in out.chunks_mut(8) {
            h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29) ^ 0x5851_f42d_4c95_7f2d;
            chunk.copy_from_slice(&h.to_le_bytes());
        }
        out
    }
}

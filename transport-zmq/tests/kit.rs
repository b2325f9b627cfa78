//! The transport test kit over ZeroMQ, nodes in this process on 127.0.0.1.

use std::sync::Arc;

use parma_conformance::kit::{self, KitCluster};
use parma_core::session::Token;
use parma_core::NodeId;
use parma_transport_zmq::{local_cluster, ZmqOptions, ZmqTransport};

/// A token for tests: not a keyed hash, but it differs by nonce, ends and digest.
struct TestToken(u64);

impl Token for TestToken {
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

/// Small windows, so that back-pressure shows early.
struct Zmq;

impl KitCluster for Zmq {
    type T = ZmqTransport;
    fn make(&mut self, n: u16) -> Vec<ZmqTransport> {
        let mut opts = ZmqOptions::loopback();
        opts.session.frame_len_max = 1 << 20;
        opts.session.window_bytes_max = 4 << 20;
        opts.session.window_frames_max = 256;
        opts.session.recv_frames_max = 256;
        opts.self_frames_max = 256;
        opts.linger = std::time::Duration::from_millis(500);
        local_cluster(n, &opts, 0xfeed, Arc::new(TestToken(42))).expect("a cluster on 127.0.0.1")
    }
    fn pause(&mut self) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn the_zeromq_transport_keeps_the_contract() {
    let report = kit::run(&mut Zmq);
    assert!(report.passed(), "{report}");
}

//! The transport test kit over ZeroMQ, nodes in this process on 127.0.0.1.
#![forbid(unsafe_code)]

use std::sync::Arc;

use parma_conformance::kit::{self, KitCluster};
use parma_runtime::startup::ClusterToken;
use parma_transport_zmq::{local_cluster, ZmqOptions, ZmqTransport};

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
        local_cluster(n, &opts, 0xfeed, Arc::new(ClusterToken::generate())).expect("a cluster on 127.0.0.1")
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

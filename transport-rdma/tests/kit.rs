//! The transport test kit over RDMA: nodes in this process on the machine's RDMA device (in
//! CI: the VM's Soft-RoCE `rxe0`, `../shared/tools/rdma-vm`).

use std::sync::Arc;
use std::time::Duration;

use parma_conformance::kit::{self, KitCluster};
use parma_runtime::startup::ClusterToken;
use parma_transport_rdma::{local_cluster, Completion, RdmaOptions, RdmaTransport, Wire};

/// Small rings, so that back-pressure shows early and longer frames go in chunks (send slots). Counts
/// clusters made and pauses, and says so on stderr, so that a slow check shows which it is.
struct Rdma(Completion, Wire, u32, u64);

impl KitCluster for Rdma {
    type T = RdmaTransport;
    fn make(&mut self, n: u16) -> Vec<RdmaTransport> {
        self.2 += 1;
        eprintln!("kit: cluster {} of {n} nodes ({} pauses so far)", self.2, self.3);
        let mut o = RdmaOptions::loopback();
        o.wire = self.1;
        o.slot_len = 4096;
        // The fifo check's 100 frames (up to 2 KiB) wait in the send ring: it holds them; the
        // peer's ring takes 16 records at a time. (`basics.rs` chunks through a small ring.)
        o.ring_len = 256 << 10;
        o.ring_msgs = 16;
        o.recv_slots = 16;
        // The kit's fifo check sends 100 frames per pair before it reads any.
        o.send_slots = 128;
        o.frame_len_max = 1 << 20;
        o.self_frames_max = 256;
        o.heartbeat_interval = Duration::from_millis(100);
        o.peer_timeout = Duration::from_secs(2);
        o.linger = Duration::from_millis(500);
        o.completion = self.0;
        local_cluster(n, &o, 0xfeed, Arc::new(ClusterToken::generate()))
            .expect("a cluster on the RDMA device")
    }
    fn pause(&mut self) {
        self.3 += 1;
        if self.3 % 2000 == 0 {
            eprintln!("kit: {} pauses", self.3);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn the_ring_keeps_the_contract_with_a_completion_channel() {
    let report = kit::run(&mut Rdma(Completion::Channel, Wire::Ring, 0, 0));
    assert!(report.passed(), "{report}");
}

#[test]
fn the_ring_keeps_the_contract_when_polling() {
    let report = kit::run(&mut Rdma(Completion::Poll, Wire::Ring, 0, 0));
    assert!(report.passed(), "{report}");
}

#[test]
fn send_slots_keep_the_contract_with_a_completion_channel() {
    let report = kit::run(&mut Rdma(Completion::Channel, Wire::Send, 0, 0));
    assert!(report.passed(), "{report}");
}

#[test]
fn send_slots_keep_the_contract_when_polling() {
    let report = kit::run(&mut Rdma(Completion::Poll, Wire::Send, 0, 0));
    assert!(report.passed(), "{report}");
}

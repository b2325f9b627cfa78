//! The transport test kit over RDMA: nodes in this process on the machine's RDMA device (in
//! CI: the VM's Soft-RoCE `rxe0`, `../shared/tools/rdma-vm`).

use std::sync::Arc;
use std::time::Duration;

use parma_conformance::kit::{self, KitCluster};
use parma_runtime::startup::ClusterToken;
use parma_transport_rdma::{local_cluster, Completion, RdmaOptions, RdmaTransport};

/// Small rings, so that back-pressure shows early and longer frames go in chunks. Counts
/// clusters made and pauses, and says so on stderr, so that a slow check shows which it is.
struct Rdma(Completion, u32, u64);

impl KitCluster for Rdma {
    type T = RdmaTransport;
    fn make(&mut self, n: u16) -> Vec<RdmaTransport> {
        self.1 += 1;
        eprintln!("kit: cluster {} of {n} nodes ({} pauses so far)", self.1, self.2);
        let mut o = RdmaOptions::loopback();
        o.slot_len = 4096;
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
        self.2 += 1;
        if self.2 % 2000 == 0 {
            eprintln!("kit: {} pauses", self.2);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn the_rdma_transport_keeps_the_contract_with_a_completion_channel() {
    let report = kit::run(&mut Rdma(Completion::Channel, 0, 0));
    assert!(report.passed(), "{report}");
}

#[test]
fn the_rdma_transport_keeps_the_contract_when_polling() {
    let report = kit::run(&mut Rdma(Completion::Poll, 0, 0));
    assert!(report.passed(), "{report}");
}

//! The transport test kit on every transport of this repository.
#![forbid(unsafe_code)]

use parma_conformance::kit::{self, KitCluster};
use parma_core::time::Duration;
use parma_transport_loopback::sim::{Faults, SimNet, SimTransport};
use parma_transport_loopback::threaded::{cluster, ThreadedOptions, ThreadedTransport};

/// The threaded transport with small bounds per pair, so that back-pressure shows early.
struct Threaded;

impl KitCluster for Threaded {
    type T = ThreadedTransport;
    fn make(&mut self, n: u16) -> Vec<ThreadedTransport> {
        let opts = ThreadedOptions::default()
            .with_pair_frames_max(256)
            .with_pair_bytes_max(1 << 20)
            .with_frame_len_max(1 << 20);
        cluster(n, opts)
    }
    fn pause(&mut self) {
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// The simulated network with delays and jitter; a pause is a millisecond of virtual time.
struct Sim(Option<SimNet>);

impl KitCluster for Sim {
    type T = SimTransport;
    fn make(&mut self, n: u16) -> Vec<SimTransport> {
        let faults = Faults { delay_max_us: 300, jitter_us: 200, pair_frames_max: 256, ..Faults::none() };
        let net = SimNet::new(n, faults, 7);
        let ends = net.endpoints();
        self.0 = Some(net);
        ends
    }
    fn pause(&mut self) {
        if let Some(net) = &self.0 {
            net.advance_by(Duration::from_millis(1));
        }
    }
}

#[test]
fn the_threaded_transport_keeps_the_contract() {
    let report = kit::run(&mut Threaded);
    assert!(report.passed(), "{report}");
}

#[test]
fn the_simulated_transport_keeps_the_contract() {
    let report = kit::run(&mut Sim(None));
    assert!(report.passed(), "{report}");
}

/// A transport that breaks the contract: it silently drops every 97th frame it accepts.
struct Lossy {
    inner: ThreadedTransport,
    sends: u64,
}

impl parma_core::Transport for Lossy {
    fn local_id(&self) -> parma_core::NodeId {
        self.inner.local_id()
    }
    fn frame_len_max(&self) -> usize {
        self.inner.frame_len_max()
    }
    fn try_send(
        &mut self,
        to: parma_core::NodeId,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<(), parma_core::transport::SendError> {
        self.sends += 1;
        if self.sends % 97 == 0 {
            return Ok(());
        }
        self.inner.try_send(to, len, fill)
    }
    fn poll_recv(
        &mut self,
        max: usize,
        sink: &mut dyn FnMut(parma_core::NodeId, &[u8]),
    ) -> Result<usize, parma_core::transport::RecvError> {
        self.inner.poll_recv(max, sink)
    }
    fn poll_event(&mut self) -> Option<parma_core::transport::TransportEvent> {
        self.inner.poll_event()
    }
    fn register_waker(&mut self, waker: &std::task::Waker) {
        self.inner.register_waker(waker)
    }
    fn close(&mut self) {
        self.inner.close()
    }
}

struct LossyCluster;

impl KitCluster for LossyCluster {
    type T = Lossy;
    fn make(&mut self, n: u16) -> Vec<Lossy> {
        Threaded.make(n).into_iter().map(|inner| Lossy { inner, sends: 0 }).collect()
    }
    fn pause(&mut self) {
        Threaded.pause()
    }
}

#[test]
fn the_kit_fails_a_transport_that_loses_frames() {
    let report = kit::run(&mut LossyCluster);
    let failed: Vec<&str> = report.results.iter().filter(|(_, r)| r.is_err()).map(|(n, _)| *n).collect();
    assert!(failed.contains(&"fifo") && failed.contains(&"stress"), "{report}");
}

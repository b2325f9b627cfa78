//! A transport that refuses a frame for good (`SendError::TooLarge`) although it accepted
//! `Config::frame_len_max` at start: the request that needed the frame fails at once with
//! `OpError::FrameRefused`, whichever node's transport refused it, instead of waiting for its
//! deadline; requests whose frames go through still succeed.
#![forbid(unsafe_code)]

mod common;

use std::task::Waker;
use std::time::Duration;

use parma_core::transport::{RecvError, SendError, Transport, TransportEvent};
use parma_core::{Config, Key, Layout, NodeId, OpError, Technique};
use parma_runtime::{NodeRuntime, Options};
use parma_transport_loopback::threaded::{cluster, ThreadedOptions, ThreadedTransport};

/// Floats per key: a pull reply of many keys is large, a pull request is not.
const LEN: usize = 64;

/// The threaded transport, refusing every frame longer than `limit` bytes.
struct Refusing {
    inner: ThreadedTransport,
    limit: usize,
}

impl Transport for Refusing {
    fn local_id(&self) -> NodeId {
        self.inner.local_id()
    }
    fn frame_len_max(&self) -> usize {
        self.inner.frame_len_max()
    }
    fn try_send(&mut self, to: NodeId, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), SendError> {
        if len > self.limit {
            return Err(SendError::TooLarge);
        }
        self.inner.try_send(to, len, fill)
    }
    fn poll_recv(&mut self, max: usize, sink: &mut dyn FnMut(NodeId, &[u8])) -> Result<usize, RecvError> {
        self.inner.poll_recv(max, sink)
    }
    fn poll_event(&mut self) -> Option<TransportEvent> {
        self.inner.poll_event()
    }
    fn register_waker(&mut self, waker: &Waker) {
        self.inner.register_waker(waker)
    }
    fn close(&mut self) {
        self.inner.close()
    }
}

#[test]
fn a_refused_frame_fails_its_request_at_once() {
    let mut cfg = Config::new(2, 1, Layout::uniform(1_000, LEN as u32).unwrap());
    cfg.technique = Technique::StaticPartitioning;
    // Long enough that a request waiting for its deadline would fail the test's own bound.
    cfg.request_timeout = parma_core::Duration::from_secs(30);
    let limit = 2_048;
    let (mut nodes, mut workers) = (Vec::new(), Vec::new());
    for (i, t) in cluster(2, ThreadedOptions::default()).into_iter().enumerate() {
        let t = Refusing { inner: t, limit };
        let (n, ws) = NodeRuntime::start_with(cfg.clone(), NodeId(i as u16), t, Options::default()).unwrap();
        nodes.push(n);
        workers.extend(ws);
    }
    let homes = parma_core::placement::Homes::new(cfg.placement, cfg.nodes, cfg.layout.key_end());
    let remote: Vec<Key> = (0..1_000).map(Key).filter(|k| homes.home(*k) == NodeId(1)).take(40).collect();
    assert_eq!(remote.len(), 40);
    let w = &mut workers[0];
    let started = std::time::Instant::now();

    // A push of 40 remote keys is refused by node 0's transport.
    let values = vec![1.0f32; remote.len() * LEN];
    let t = w.push(&remote, &values).unwrap();
    assert_eq!(w.wait(t), Err(OpError::FrameRefused { node: NodeId(1) }));
    // A pull of them goes out, and its reply is refused by node 1's transport.
    let mut out = vec![0.0f32; remote.len() * LEN];
    assert_eq!(w.pull(&remote, &mut out), Err(OpError::FrameRefused { node: NodeId(1) }));
    // One remote key at a time fits.
    let t = w.push(&remote[..1], &values[..LEN]).unwrap();
    w.wait(t).unwrap();
    w.pull(&remote[..1], &mut out[..LEN]).unwrap();
    assert_eq!(out[0], 1.0);
    assert!(started.elapsed() < Duration::from_secs(30), "a refused request waited for its deadline");
    assert!(
        OpError::FrameRefused { node: NodeId(1) }.to_string().contains("node 1"),
        "the error names the node"
    );
    drop(workers);
    let stats = common::shutdown_all(nodes);
    assert_eq!(stats[0].node.messages_refused, 1, "node 0 refused the push");
    assert_eq!(stats[1].node.messages_refused, 1, "node 1 refused the pull's reply");
}

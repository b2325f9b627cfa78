use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::task::{Wake, Waker};
use std::thread;

use parma_core::ids::NodeId;
use parma_core::transport::{RecvError, SendError, Transport, TransportEvent};

use super::{cluster, ThreadedOptions, ThreadedTransport};
use crate::sim::SplitMix64;

/// A waker that counts its wakes.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting_waker() -> (Arc<CountingWaker>, Waker) {
    let counter = Arc::new(CountingWaker::default());
    (Arc::clone(&counter), Waker::from(counter))
}

fn wakes(counter: &CountingWaker) -> usize {
    counter.0.load(Ordering::SeqCst)
}

fn send(t: &mut ThreadedTransport, to: u16, bytes: &[u8]) -> Result<(), SendError> {
    t.try_send(NodeId(to), bytes.len(), &mut |buf| buf.copy_from_slice(bytes))
}

fn recv_all(t: &mut ThreadedTransport) -> Vec<(u16, Vec<u8>)> {
    let mut got = Vec::new();
    t.poll_recv(usize::MAX, &mut |from, frame| got.push((from.0, frame.to_vec()))).unwrap();
    got
}

fn small(frames: usize) -> ThreadedOptions {
    ThreadedOptions { pair_frames_max: frames, ..ThreadedOptions::default() }
}

#[test]
fn transport_is_send() {
    fn assert_send<T: Send + 'static>() {}
    assert_send::<ThreadedTransport>();
    assert_send::<super::ThreadedController>();
}

#[test]
fn receive_is_round_robin_across_senders() {
    let mut nodes = cluster(3, ThreadedOptions::default());
    for i in 0u8..4 {
        send(&mut nodes[0], 2, &[i]).unwrap();
    }
    send(&mut nodes[1], 2, &[100]).unwrap();
    send(&mut nodes[1], 2, &[101]).unwrap();
    let got: Vec<_> = recv_all(&mut nodes[2]).into_iter().map(|(f, b)| (f, b[0])).collect();
    assert_eq!(got, vec![(0, 0), (1, 100), (0, 1), (1, 101), (0, 2), (0, 3)]);
}

#[test]
fn max_frames_limits_and_leftovers_wake_again() {
    let mut nodes = cluster(2, ThreadedOptions::default());
    let (counter, waker) = counting_waker();
    nodes[1].register_waker(&waker);
    for i in 0u8..5 {
        send(&mut nodes[0], 1, &[i]).unwrap();
    }
    let woken = wakes(&counter);
    assert_eq!(woken, 1, "arrivals wake once until the receiver polls");
    let mut got = Vec::new();
    assert_eq!(nodes[1].poll_recv(3, &mut |_, b| got.push(b[0])).unwrap(), 3);
    assert!(wakes(&counter) > woken, "frames left behind must wake the driver again");
    assert_eq!(nodes[1].poll_recv(3, &mut |_, b| got.push(b[0])).unwrap(), 2);
    assert_eq!(got, vec![0, 1, 2, 3, 4]);
    assert_eq!(nodes[1].poll_recv(0, &mut |_, _| panic!()).unwrap(), 0);
}

#[test]
fn arrival_wakes_the_receiver() {
    let mut nodes = cluster(2, ThreadedOptions::default());
    let (counter, waker) = counting_waker();
    nodes[1].register_waker(&waker);
    assert_eq!(recv_all(&mut nodes[1]).len(), 0);
    assert_eq!(wakes(&counter), 0);
    send(&mut nodes[0], 1, b"x").unwrap();
    assert_eq!(wakes(&counter), 1);
    assert_eq!(recv_all(&mut nodes[1]).len(), 1);
    send(&mut nodes[0], 1, b"y").unwrap();
    assert_eq!(wakes(&counter), 2);
}

#[test]
fn full_queue_would_block_without_filling_then_drain_wakes_sender() {
    let mut nodes = cluster(2, small(2));
    let (counter, waker) = counting_waker();
    nodes[0].register_waker(&waker);
    send(&mut nodes[0], 1, b"a").unwrap();
    send(&mut nodes[0], 1, b"b").unwrap();
    let r = nodes[0].try_send(NodeId(1), 1, &mut |_| panic!("fill called on WouldBlock"));
    assert_eq!(r, Err(SendError::WouldBlock));
    // Other pairs are not affected.
    send(&mut nodes[0], 0, b"self").unwrap();
    assert_eq!(wakes(&counter), 1, "only the frame to self woke node 0 so far");
    let mut got = Vec::new();
    nodes[1].poll_recv(1, &mut |_, b| got.push(b.to_vec())).unwrap();
    assert_eq!(wakes(&counter), 2, "the drain wakes the blocked sender");
    send(&mut nodes[0], 1, b"c").unwrap();
    nodes[1].poll_recv(10, &mut |_, b| got.push(b.to_vec())).unwrap();
    assert_eq!(got, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    assert_eq!(wakes(&counter), 2, "no wake without a blocked send");
}

#[test]
fn byte_cap_blocks_but_lets_a_lone_large_frame_through() {
    let opts = ThreadedOptions { pair_bytes_max: 100, ..ThreadedOptions::default() };
    let mut nodes = cluster(2, opts);
    send(&mut nodes[0], 1, &[1; 60]).unwrap();
    assert_eq!(send(&mut nodes[0], 1, &[2; 60]), Err(SendError::WouldBlock));
    send(&mut nodes[0], 1, &[3; 40]).unwrap();
    assert_eq!(recv_all(&mut nodes[1]).len(), 2);
    send(&mut nodes[0], 1, &[4; 500]).unwrap();
    assert_eq!(send(&mut nodes[0], 1, &[5; 1]), Err(SendError::WouldBlock));
    assert_eq!(recv_all(&mut nodes[1]), vec![(0, vec![4; 500])]);
}

#[test]
fn close_delivers_what_was_sent_then_reports_the_peer_once() {
    let mut nodes = cluster(3, ThreadedOptions::default());
    let (counter, waker) = counting_waker();
    nodes[1].register_waker(&waker);
    send(&mut nodes[0], 1, b"last words").unwrap();
    send(&mut nodes[1], 0, b"lost").unwrap();
    nodes[0].close();
    assert!(wakes(&counter) >= 2, "the arrival and the failure wake the peer");
    assert_eq!(nodes[1].poll_event(), None, "frames from the peer come first");
    assert_eq!(recv_all(&mut nodes[1]), vec![(0, b"last words".to_vec())]);
    assert_eq!(nodes[1].poll_event(), Some(TransportEvent::PeerFailed(NodeId(0))));
    assert_eq!(nodes[1].poll_event(), None);
    assert_eq!(nodes[2].poll_event(), Some(TransportEvent::PeerFailed(NodeId(0))));
    assert_eq!(nodes[2].poll_event(), None);
    assert_eq!(send(&mut nodes[1], 0, b"x"), Err(SendError::PeerFailed));
    assert_eq!(send(&mut nodes[0], 1, b"x"), Err(SendError::Closed));
    assert_eq!(nodes[0].poll_recv(10, &mut |_, _| panic!()), Err(RecvError::Closed));
    assert_eq!(nodes[0].poll_event(), None);
    assert!(nodes[1].controller().is_failed(NodeId(0)));
}

#[test]
fn dropping_a_transport_closes_it() {
    let mut nodes = cluster(2, ThreadedOptions::default());
    let gone = nodes.remove(0);
    drop(gone);
    assert_eq!(nodes[0].poll_event(), Some(TransportEvent::PeerFailed(NodeId(0))));
}

#[test]
fn kill_drops_queued_frames_and_reports_at_once() {
    let mut nodes = cluster(3, small(1));
    let control = nodes[0].controller();
    let (counter, waker) = counting_waker();
    nodes[1].register_waker(&waker);
    send(&mut nodes[0], 1, b"from the dead").unwrap();
    send(&mut nodes[2], 0, b"to the dead").unwrap();
    // Node 1 waits for room toward node 0.
    send(&mut nodes[1], 0, b"a").unwrap();
    assert_eq!(send(&mut nodes[1], 0, b"b"), Err(SendError::WouldBlock));
    let before = wakes(&counter);
    control.kill(NodeId(0));
    assert!(wakes(&counter) > before, "the blocked sender is woken to see the failure");
    assert_eq!(control.queued(NodeId(0), NodeId(1)), 0);
    assert_eq!(control.queued(NodeId(2), NodeId(0)), 0);
    assert_eq!(nodes[1].poll_event(), Some(TransportEvent::PeerFailed(NodeId(0))));
    assert!(recv_all(&mut nodes[1]).is_empty());
    assert_eq!(send(&mut nodes[1], 0, b"b"), Err(SendError::PeerFailed));
    assert_eq!(send(&mut nodes[0], 1, b"x"), Err(SendError::Closed));
    assert_eq!(nodes[2].poll_event(), Some(TransportEvent::PeerFailed(NodeId(0))));
    control.kill(NodeId(0));
    nodes[0].close();
    assert_eq!(nodes[1].poll_event(), None, "a failure is reported once");
    // The survivors still talk.
    send(&mut nodes[1], 2, b"ok").unwrap();
    assert_eq!(recv_all(&mut nodes[2]), vec![(1, b"ok".to_vec())]);
}

#[test]
fn killing_a_closed_node_drops_its_undelivered_frames() {
    let mut nodes = cluster(2, ThreadedOptions::default());
    send(&mut nodes[0], 1, b"never").unwrap();
    nodes[0].close();
    nodes[1].controller().kill(NodeId(0));
    assert_eq!(nodes[1].poll_event(), Some(TransportEvent::PeerFailed(NodeId(0))));
    assert!(recv_all(&mut nodes[1]).is_empty());
}

/// Wakes a parked driver thread.
struct ThreadWaker(thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

const STRESS_NODES: u16 = 4;
const STRESS_PER_PAIR: u64 = 6250; // 4 * 4 * 6250 = 100_000 frames

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// Frame: from (2) | to (2) | seq (8) | payload | fnv of all before (8).
fn encode(buf: &mut [u8], from: u16, to: u16, seq: u64) {
    let body = buf.len() - 8;
    buf[0..2].copy_from_slice(&from.to_le_bytes());
    buf[2..4].copy_from_slice(&to.to_le_bytes());
    buf[4..12].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in buf[12..body].iter_mut().enumerate() {
        *b = (seq as u8).wrapping_mul(31).wrapping_add(i as u8);
    }
    let sum = fnv(&buf[..body]);
    buf[body..].copy_from_slice(&sum.to_le_bytes());
}

/// One node of the stress test: sends `STRESS_PER_PAIR` frames to every node (itself included)
/// in a seeded order, checks every frame it receives, parks when it can do nothing.
fn stress_driver(mut t: ThreadedTransport) -> (u64, u64, ThreadedTransport) {
    let me = t.local_id().0;
    t.register_waker(&Waker::from(Arc::new(ThreadWaker(thread::current()))));
    let mut rng = SplitMix64::new(u64::from(me));
    let mut next_seq = vec![0u64; usize::from(STRESS_NODES)];
    let mut expect_seq = vec![0u64; usize::from(STRESS_NODES)];
    let total = STRESS_PER_PAIR * u64::from(STRESS_NODES);
    let (mut sent, mut received, mut blocked) = (0u64, 0u64, 0u64);
    let mut pending: Option<u16> = None;
    while sent < total || received < total {
        let mut progress = false;
        while sent < total {
            let to = *pending.get_or_insert_with(|| loop {
                let to = rng.below(u64::from(STRESS_NODES)) as u16;
                if next_seq[usize::from(to)] < STRESS_PER_PAIR {
                    break to;
                }
            });
            let seq = next_seq[usize::from(to)];
            let len = 20 + (seq % 200) as usize;
            match t.try_send(NodeId(to), len, &mut |buf| encode(buf, me, to, seq)) {
                Ok(()) => {
                    next_seq[usize::from(to)] += 1;
                    sent += 1;
                    pending = None;
                    progress = true;
                }
                Err(SendError::WouldBlock) => {
                    blocked += 1;
                    break;
                }
                Err(e) => panic!("node {me}: send failed: {e:?}"),
            }
        }
        let n = t
            .poll_recv(256, &mut |from, frame| {
                let body = frame.len() - 8;
                let sum = u64::from_le_bytes(frame[body..].try_into().unwrap());
                assert_eq!(sum, fnv(&frame[..body]), "corrupt frame");
                assert_eq!(u16::from_le_bytes([frame[0], frame[1]]), from.0);
                assert_eq!(u16::from_le_bytes([frame[2], frame[3]]), me);
                let seq = u64::from_le_bytes(frame[4..12].try_into().unwrap());
                assert_eq!(seq, expect_seq[from.index()], "frames from {from:?} out of order");
                assert_eq!(frame.len(), 20 + (seq % 200) as usize);
                expect_seq[from.index()] += 1;
            })
            .unwrap();
        received += n as u64;
        if n > 0 {
            progress = true;
        }
        if !progress {
            thread::park();
        }
    }
    // Returned, not dropped: dropping would close it while other drivers still run.
    (received, blocked, t)
}

#[test]
fn stress_four_nodes_exchange_100k_checked_frames() {
    let opts = ThreadedOptions { pair_frames_max: 64, ..ThreadedOptions::default() };
    let (done_tx, done_rx) = mpsc::channel();
    let handles: Vec<_> = cluster(STRESS_NODES, opts)
        .into_iter()
        .map(|t| {
            let done = done_tx.clone();
            thread::spawn(move || {
                let result = stress_driver(t);
                done.send(()).unwrap();
                result
            })
        })
        .collect();
    for _ in 0..STRESS_NODES {
        // A lost wakeup hangs a driver; fail loudly instead of hanging the test run.
        done_rx.recv_timeout(std::time::Duration::from_secs(120)).expect("a driver hung or panicked");
    }
    let mut received = 0;
    let mut nodes = Vec::new();
    for h in handles {
        let (n, _blocked, t) = h.join().unwrap();
        received += n;
        nodes.push(t);
    }
    for t in &mut nodes {
        assert_eq!(t.poll_event(), None);
        assert!(recv_all(t).is_empty());
    }
    assert_eq!(received, STRESS_PER_PAIR * u64::from(STRESS_NODES) * u64::from(STRESS_NODES));
}

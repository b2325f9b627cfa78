use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};

use parma_core::ids::NodeId;
use parma_core::time::{Duration, Instant};
use parma_core::transport::{RecvError, SendError, Transport, TransportEvent};

use super::{Faults, SimNet, SimTransport, SplitMix64};

#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
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

fn send(t: &mut SimTransport, to: u16, bytes: &[u8]) -> Result<(), SendError> {
    t.try_send(NodeId(to), bytes.len(), &mut |buf| buf.copy_from_slice(bytes))
}

fn recv_all(t: &mut SimTransport) -> Vec<(u16, Vec<u8>)> {
    let mut got = Vec::new();
    t.poll_recv(usize::MAX, &mut |from, frame| got.push((from.0, frame.to_vec()))).unwrap();
    got
}

/// A frame of the traffic tests: from, to, sequence number on its pair, the send time.
fn frame(from: u16, to: u16, seq: u64, sent_at: Instant) -> Vec<u8> {
    let mut f = Vec::with_capacity(20 + (seq % 7) as usize);
    f.extend_from_slice(&from.to_le_bytes());
    f.extend_from_slice(&to.to_le_bytes());
    f.extend_from_slice(&seq.to_le_bytes());
    f.extend_from_slice(&sent_at.0.to_le_bytes());
    f.resize(20 + (seq % 7) as usize, seq as u8);
    f
}

/// What one node received, in order: (sender, sequence number, send time, receive time).
type Log = Vec<(u16, u64, u64, u64)>;

/// Random traffic among `n` nodes under `faults`, driven by a seeded schedule, then drained.
/// Checks FIFO per pair and that nothing is lost; returns the receive logs and the trace hash.
fn run_traffic(n: u16, faults: Faults, seed: u64, frames: usize) -> (Vec<Log>, u64) {
    let net = SimNet::new(n, faults, seed);
    let mut nodes = net.endpoints();
    let mut driver = SplitMix64::derive(seed, &[0xD1]);
    let mut next_seq = vec![0u64; usize::from(n) * usize::from(n)];
    let mut logs = vec![Log::new(); usize::from(n)];
    let mut sent = 0;
    let mut steps = 0;
    while sent < frames || net.in_flight() > 0 {
        steps += 1;
        assert!(steps < 100 * frames + 1000, "seed {seed}: the network does not drain");
        if sent < frames && !driver.one_in(3) {
            let (from, to) = (driver.below(u64::from(n)) as u16, driver.below(u64::from(n)) as u16);
            let pair = usize::from(from) * usize::from(n) + usize::from(to);
            let bytes = frame(from, to, next_seq[pair], net.now());
            match send(&mut nodes[usize::from(from)], to, &bytes) {
                Ok(()) => {
                    next_seq[pair] += 1;
                    sent += 1;
                }
                Err(SendError::WouldBlock) => {}
                Err(e) => panic!("seed {seed}: {e:?}"),
            }
        } else if driver.one_in(2) {
            net.advance_by(Duration(driver.below(2_000)));
        } else if let Some(t) = net.next_delivery_time() {
            net.advance_to(t);
        }
        let now = net.now().0;
        for (me, node) in nodes.iter_mut().enumerate() {
            let max = 1 + driver.below(8) as usize;
            node.poll_recv(max, &mut |from, f| {
                assert_eq!(u16::from_le_bytes([f[2], f[3]]), me as u16);
                let seq = u64::from_le_bytes(f[4..12].try_into().unwrap());
                let sent_at = u64::from_le_bytes(f[12..20].try_into().unwrap());
                logs[me].push((from.0, seq, sent_at, now));
            })
            .unwrap();
        }
    }
    for (me, log) in logs.iter().enumerate() {
        let mut expect = vec![0u64; usize::from(n)];
        for &(from, seq, sent_at, at) in log {
            assert_eq!(seq, expect[usize::from(from)], "seed {seed}: pair {from}->{me} not FIFO");
            assert!(at >= sent_at + faults.delay_min_us, "seed {seed}: frame delivered too early");
            expect[usize::from(from)] += 1;
        }
        for from in 0..usize::from(n) {
            assert_eq!(expect[from], next_seq[from * usize::from(n) + me], "seed {seed}: frames lost");
        }
    }
    assert_eq!(net.delivered(), frames as u64);
    (logs, net.trace_hash())
}

#[test]
fn fifo_per_pair_and_nothing_lost_over_many_seeds() {
    for seed in 0..64 {
        run_traffic(4, Faults::from_seed(seed), seed, 400);
    }
}

#[test]
fn pairs_reorder_across_each_other_for_some_seeds() {
    let faults = Faults { delay_min_us: 0, delay_max_us: 5_000, jitter_us: 500, ..Faults::none() };
    let reordered = (0..16).filter(|&seed| {
        let (logs, _) = run_traffic(3, faults, seed, 300);
        // A frame sent later than another, from another sender, received before it.
        logs.iter().any(|log| log.windows(2).any(|w| w[0].0 != w[1].0 && w[0].2 > w[1].2 && w[0].3 <= w[1].3))
    });
    assert!(reordered.count() > 0, "no seed reordered frames across pairs");
}

#[test]
fn same_seed_same_trace_other_seed_other_trace() {
    let hash = |seed: u64| run_traffic(4, Faults::from_seed(seed), seed, 300).1;
    for seed in [1, 2, 99, 12345] {
        assert_eq!(hash(seed), hash(seed), "seed {seed} did not replay");
    }
    let mut hashes: Vec<u64> = (0..16).map(hash).collect();
    hashes.sort_unstable();
    hashes.dedup();
    assert!(hashes.len() >= 15, "different seeds should give different traces");
}

#[test]
fn from_seed_is_deterministic_and_varied() {
    assert_eq!(Faults::from_seed(5), Faults::from_seed(5));
    let all: Vec<Faults> = (0..200).map(Faults::from_seed).collect();
    assert!(all.iter().any(|f| f.pauses()));
    assert!(all.iter().any(|f| !f.pauses()));
    assert!(all.iter().any(|f| f.pair_frames_max < 100));
    assert!(all.iter().any(|f| f.delay_max_us == 0));
    assert!(all.iter().any(|f| f.delay_max_us >= 10_000));
    assert!(all.iter().all(|f| f.delay_min_us <= f.delay_max_us));
}

#[test]
fn no_faults_deliver_at_once_including_to_self() {
    let net = SimNet::new(2, Faults::none(), 0);
    let mut nodes = net.endpoints();
    send(&mut nodes[0], 0, b"me").unwrap();
    send(&mut nodes[0], 1, b"you").unwrap();
    assert_eq!(net.next_delivery_time(), Some(Instant(0)));
    assert!(net.ready(NodeId(0)) && net.ready(NodeId(1)));
    assert_eq!(recv_all(&mut nodes[0]), vec![(0, b"me".to_vec())]);
    assert_eq!(recv_all(&mut nodes[1]), vec![(0, b"you".to_vec())]);
    assert_eq!(net.in_flight(), 0);
    assert_eq!(net.next_delivery_time(), None);
}

#[test]
fn fixed_delay_is_the_same_on_every_pair() {
    let net = SimNet::new(3, Faults::fixed_delay(70), 9);
    let mut nodes = net.endpoints();
    send(&mut nodes[0], 1, b"a").unwrap();
    send(&mut nodes[2], 0, b"b").unwrap();
    net.advance_to(Instant(69));
    assert!(!net.ready(NodeId(0)) && !net.ready(NodeId(1)));
    net.advance_to(Instant(70));
    assert_eq!(recv_all(&mut nodes[1]), vec![(0, b"a".to_vec())]);
    assert_eq!(recv_all(&mut nodes[0]), vec![(2, b"b".to_vec())]);
}

#[test]
fn frames_wait_for_their_delivery_time() {
    let net = SimNet::new(2, Faults::none(), 0);
    net.set_delay(NodeId(0), NodeId(1), Duration(100));
    let mut nodes = net.endpoints();
    let (counter, waker) = counting_waker();
    nodes[1].register_waker(&waker);
    send(&mut nodes[0], 1, b"x").unwrap();
    assert_eq!(wakes(&counter), 0);
    assert!(recv_all(&mut nodes[1]).is_empty());
    assert_eq!(net.next_delivery_time(), Some(Instant(100)));
    net.advance_to(Instant(99));
    assert!(recv_all(&mut nodes[1]).is_empty());
    net.advance_to(Instant(100));
    assert_eq!(wakes(&counter), 1, "the arrival wakes the receiver");
    assert_eq!(recv_all(&mut nodes[1]), vec![(0, b"x".to_vec())]);
}

#[test]
fn a_later_frame_never_overtakes_on_its_pair() {
    let net = SimNet::new(2, Faults::none(), 0);
    let mut nodes = net.endpoints();
    net.set_delay(NodeId(0), NodeId(1), Duration(1_000));
    send(&mut nodes[0], 1, b"slow").unwrap();
    net.set_delay(NodeId(0), NodeId(1), Duration(0));
    send(&mut nodes[0], 1, b"fast").unwrap();
    assert!(recv_all(&mut nodes[1]).is_empty());
    net.advance_to(Instant(1_000));
    assert_eq!(recv_all(&mut nodes[1]), vec![(0, b"slow".to_vec()), (0, b"fast".to_vec())]);
}

#[test]
fn pause_holds_inbound_frames() {
    let net = SimNet::new(2, Faults::none(), 0);
    let mut nodes = net.endpoints();
    net.pause(NodeId(1), Instant(500));
    send(&mut nodes[0], 1, b"held").unwrap();
    send(&mut nodes[1], 0, b"free").unwrap();
    assert_eq!(net.next_delivery_time(), Some(Instant(0)), "node 0 is not paused");
    assert_eq!(recv_all(&mut nodes[0]).len(), 1);
    assert_eq!(net.next_delivery_time(), Some(Instant(500)));
    net.advance_to(Instant(499));
    assert!(recv_all(&mut nodes[1]).is_empty());
    net.advance_to(Instant(500));
    assert_eq!(recv_all(&mut nodes[1]), vec![(0, b"held".to_vec())]);
}

#[test]
fn heal_makes_everything_due_now_in_order() {
    let faults =
        Faults { delay_min_us: 1_000_000, delay_max_us: 2_000_000, jitter_us: 1_000, ..Faults::none() };
    let faults = Faults { pause_gap_mean_us: 10, pause_len_max_us: 1_000_000, ..faults };
    let net = SimNet::new(3, faults, 11);
    let mut nodes = net.endpoints();
    for i in 0u8..10 {
        send(&mut nodes[usize::from(i % 3)], 2, &[i]).unwrap();
    }
    net.advance_to(Instant(7));
    net.heal();
    assert_eq!(net.faults(), Faults::none());
    assert_eq!(net.next_delivery_time(), Some(Instant(7)));
    send(&mut nodes[0], 2, &[10]).unwrap();
    let got = recv_all(&mut nodes[2]);
    let from0: Vec<u8> = got.iter().filter(|(f, _)| *f == 0).map(|(_, b)| b[0]).collect();
    assert_eq!(from0, vec![0, 3, 6, 9, 10]);
    assert_eq!(got.len(), 11);
    assert_eq!(net.in_flight(), 0);
}

#[test]
fn full_pair_would_block_and_drain_wakes_the_sender() {
    let net = SimNet::new(2, Faults { pair_frames_max: 2, ..Faults::none() }, 0);
    let mut nodes = net.endpoints();
    let (counter, waker) = counting_waker();
    nodes[0].register_waker(&waker);
    send(&mut nodes[0], 1, b"a").unwrap();
    send(&mut nodes[0], 1, b"b").unwrap();
    let r = nodes[0].try_send(NodeId(1), 1, &mut |_| panic!("fill called on WouldBlock"));
    assert_eq!(r, Err(SendError::WouldBlock));
    send(&mut nodes[0], 0, b"self").unwrap();
    let before = wakes(&counter);
    let mut got = Vec::new();
    nodes[1].poll_recv(1, &mut |_, b| got.push(b.to_vec())).unwrap();
    assert_eq!(wakes(&counter), before + 1);
    send(&mut nodes[0], 1, b"c").unwrap();
    nodes[1].poll_recv(10, &mut |_, b| got.push(b.to_vec())).unwrap();
    assert_eq!(got, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
}

#[test]
fn oversized_frames_and_unknown_peers_are_refused() {
    let net = SimNet::new(2, Faults { frame_len_max: 4, ..Faults::none() }, 0);
    let mut nodes = net.endpoints();
    assert_eq!(nodes[0].frame_len_max(), 4);
    send(&mut nodes[0], 1, &[0; 4]).unwrap();
    let r = nodes[0].try_send(NodeId(1), 5, &mut |_| panic!("fill called on TooLarge"));
    assert_eq!(r, Err(SendError::TooLarge));
    assert_eq!(send(&mut nodes[0], 2, b"x"), Err(SendError::UnknownPeer));
    assert_eq!(net.in_flight(), 1);
}

#[test]
fn kill_drops_frames_and_reports_once() {
    let net = SimNet::new(3, Faults::none(), 0);
    net.set_delay(NodeId(0), NodeId(1), Duration(10));
    let mut nodes = net.endpoints();
    let (counter, waker) = counting_waker();
    nodes[1].register_waker(&waker);
    send(&mut nodes[0], 1, b"from the dead").unwrap();
    send(&mut nodes[2], 0, b"to the dead").unwrap();
    send(&mut nodes[2], 1, b"alive").unwrap();
    assert_eq!(net.in_flight(), 3);
    let before = wakes(&counter);
    net.kill(NodeId(0));
    assert!(wakes(&counter) > before);
    assert!(net.is_failed(NodeId(0)));
    assert_eq!(net.in_flight(), 1);
    assert_eq!(nodes[1].poll_event(), Some(TransportEvent::PeerFailed(NodeId(0))));
    assert_eq!(nodes[1].poll_event(), None);
    net.advance_to(Instant(100));
    assert_eq!(recv_all(&mut nodes[1]), vec![(2, b"alive".to_vec())]);
    assert_eq!(send(&mut nodes[1], 0, b"x"), Err(SendError::PeerFailed));
    assert_eq!(send(&mut nodes[0], 1, b"x"), Err(SendError::Closed));
    assert_eq!(nodes[0].poll_recv(1, &mut |_, _| panic!()), Err(RecvError::Closed));
    assert_eq!(nodes[0].poll_event(), None);
    assert_eq!(nodes[2].poll_event(), Some(TransportEvent::PeerFailed(NodeId(0))));
    net.kill(NodeId(0));
    nodes[0].close();
    assert_eq!(nodes[2].poll_event(), None);
}

#[test]
fn close_delivers_sent_frames_before_the_failure() {
    let net = SimNet::new(2, Faults::none(), 0);
    net.set_delay(NodeId(0), NodeId(1), Duration(50));
    let mut nodes = net.endpoints();
    send(&mut nodes[0], 1, b"last words").unwrap();
    send(&mut nodes[1], 0, b"lost").unwrap();
    nodes[0].close();
    assert_eq!(net.in_flight(), 1, "frames to the closed node are dropped");
    assert_eq!(nodes[1].poll_event(), None, "its last frame comes first");
    net.advance_to(Instant(50));
    assert_eq!(recv_all(&mut nodes[1]), vec![(0, b"last words".to_vec())]);
    assert_eq!(nodes[1].poll_event(), Some(TransportEvent::PeerFailed(NodeId(0))));
    assert_eq!(nodes[1].poll_event(), None);
}

#[test]
fn traffic_survives_a_kill_and_the_rest_converges_after_heal() {
    for seed in 0..16 {
        let net = SimNet::new(4, Faults::from_seed(seed), seed);
        let mut nodes = net.endpoints();
        let mut rng = SplitMix64::derive(seed, &[0xC0]);
        for i in 0..200u32 {
            let (from, to) = (rng.below(4) as usize, rng.below(4) as u16);
            let _ = send(&mut nodes[from], to, &i.to_le_bytes());
            if i == 100 {
                net.kill(NodeId(3));
            }
            net.advance_by(Duration(rng.below(500)));
            for node in nodes.iter_mut().take(3) {
                node.poll_recv(4, &mut |from, _| assert!(i < 100 || from != NodeId(3))).unwrap();
            }
        }
        net.heal();
        for node in nodes.iter_mut().take(3) {
            assert_eq!(node.poll_event(), Some(TransportEvent::PeerFailed(NodeId(3))));
            recv_all(node);
        }
        assert_eq!(net.in_flight(), 0, "seed {seed}");
        assert_eq!(net.next_delivery_time(), None);
    }
}

#[test]
fn a_failure_during_fill_loses_the_frame_cleanly() {
    let net = SimNet::new(2, Faults::none(), 0);
    let mut nodes = net.endpoints();
    let killer = net.clone();
    nodes[0]
        .try_send(NodeId(1), 1, &mut |buf| {
            buf[0] = 1;
            killer.kill(NodeId(1));
        })
        .unwrap();
    assert_eq!(net.in_flight(), 0);
    let killer = net.clone();
    send(&mut nodes[0], 0, b"kept").unwrap();
    nodes[0].try_send(NodeId(0), 1, &mut |_| killer.kill(NodeId(0))).unwrap();
    assert_eq!(net.in_flight(), 0);
    assert_eq!(net.next_delivery_time(), None);
}

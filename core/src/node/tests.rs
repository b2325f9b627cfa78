//! Node tests with hand-delivered messages: bad input, bounds, timeouts, failures.

use alloc::vec;
use alloc::vec::Vec;

use super::*;
use crate::ids::{Clock, ClusterId, Epoch, Version};
use crate::layout::Layout;
use crate::time::Duration;
use crate::wire::Moved;

fn cfg(nodes: u16) -> Config {
    let mut c = Config::new(nodes, 2, Layout::uniform(64, 2).unwrap());
    c.request_timeout = Duration::from_millis(10);
    // These tests drive relocation by hand with `localize`.
    c.technique = crate::config::Technique::Relocation;
    c
}

/// [`cfg`] under adaptive management (sync rounds, intents).
fn adaptive(nodes: u16) -> Config {
    let mut c = cfg(nodes);
    c.technique = crate::config::Technique::Adaptive;
    c
}

/// A key whose home is `home` in a cluster of `nodes`.
fn key_homed(nodes: u16, home: u16) -> Key {
    let c = cfg(nodes);
    let homes = crate::placement::Homes::new(c.placement, nodes, c.layout.key_end());
    (0..64).map(Key).find(|k| homes.home(*k) == NodeId(home)).unwrap()
}

fn events(n: &mut Node) -> Vec<Event> {
    core::iter::from_fn(|| n.poll_event()).collect()
}

fn transmits(n: &mut Node) -> Vec<Transmit> {
    core::iter::from_fn(|| n.poll_transmit()).collect()
}

#[test]
fn garbage_and_strangers_are_dropped_and_counted() {
    let mut n = Node::new(cfg(2), NodeId(0)).unwrap();
    let now = Instant(0);
    n.handle_frame(now, NodeId(1), b"");
    n.handle_frame(now, NodeId(1), b"PRMA\x02\x01garbage");
    let good = Message::BarrierRelease { generation: 0 };
    // Another cluster.
    n.handle_frame(now, NodeId(1), &good.to_frame(ClusterId(1), NodeId(1), MembershipEpoch::START));
    // The header names a sender other than the one the transport saw.
    n.handle_frame(
        now,
        NodeId(1),
        &good.to_frame(n.config().wire_cluster(), NodeId(0), MembershipEpoch::START),
    );
    // A node id outside the cluster.
    n.handle_frame(
        now,
        NodeId(9),
        &good.to_frame(n.config().wire_cluster(), NodeId(9), MembershipEpoch::START),
    );
    assert_eq!(n.stats().frames_rejected, 5);
    assert_eq!(n.stats().frames_foreign, 1);
    assert!(transmits(&mut n).is_empty() && events(&mut n).is_empty());
    n.check_invariants().unwrap();
}

#[test]
fn invalid_messages_change_nothing() {
    let mut n = Node::new(cfg(2), NodeId(0)).unwrap();
    let k = key_homed(2, 0);
    let now = Instant(0);
    // A key outside the layout in an otherwise fine push: the whole message is refused.
    let push = Message::Push {
        req: RequestId(1),
        origin: NodeId(1),
        hops: 0,
        write: WriteKind::Add,
        keys: vec![k, Key(1000)],
        values: vec![1.0; 4],
    };
    n.handle_message(now, NodeId(1), push);
    // Wrong value length.
    let push = Message::Push {
        req: RequestId(2),
        origin: NodeId(1),
        hops: 0,
        write: WriteKind::Add,
        keys: vec![k],
        values: vec![1.0; 3],
    };
    n.handle_message(now, NodeId(1), push);
    // An owner update for a key this node is not home of.
    let other = key_homed(2, 1);
    let upd = Message::OwnerUpdate {
        changes: vec![wire::OwnerChange { key: other, epoch: Epoch(5), prev: NodeId(1) }],
    };
    n.handle_message(now, NodeId(1), upd);
    // A relocation of a key this node already holds: refused, the value stays.
    let reloc = Message::Relocate {
        moved: vec![Moved { key: k, epoch: Epoch(7), version: Version(0) }],
        values: vec![9.0; 2],
    };
    n.handle_message(now, NodeId(1), reloc);
    assert_eq!(n.stats().messages_rejected, 3);
    assert_eq!(n.stats().installs_failed, 1);
    let mut v = [5.0; 2];
    assert!(n.store().read(k, &mut v));
    assert_eq!(v, [0.0; 2]);
    assert!(transmits(&mut n).is_empty());
    n.check_invariants().unwrap();
}

#[test]
fn bad_commands_are_refused_before_anything_changes() {
    let mut n = Node::new(cfg(2), NodeId(0)).unwrap();
    let (now, w, t) = (Instant(0), WorkerId(0), Ticket(1));
    let k = key_homed(2, 0);
    assert_eq!(n.pull(now, w, t, &[k, Key(64)]), Err(OpError::KeyOutsideLayout { key: Key(64) }));
    assert_eq!(
        n.push(now, w, t, WriteKind::Add, &[k], &[1.0]),
        Err(OpError::ValueLength { expected: 2, got: 1 })
    );
    assert_eq!(n.push(now, w, t, WriteKind::Add, &[k, k], &[1.0; 4]), Err(OpError::DuplicateKey { key: k }));
    assert_eq!(n.pull(now, WorkerId(2), t, &[k]), Err(OpError::InvalidArgument));
    let mut v = [7.0; 2];
    assert!(n.store().read(k, &mut v));
    assert_eq!(v, [0.0; 2]);
    assert!(transmits(&mut n).is_empty() && events(&mut n).is_empty());
}

#[test]
fn pending_requests_are_bounded() {
    let mut c = cfg(2);
    c.requests_pending_max = 2;
    let mut n = Node::new(c, NodeId(0)).unwrap();
    let remote = key_homed(2, 1);
    let now = Instant(0);
    n.pull(now, WorkerId(0), Ticket(1), &[remote]).unwrap();
    n.pull(now, WorkerId(0), Ticket(2), &[remote]).unwrap();
    assert_eq!(n.pull(now, WorkerId(0), Ticket(3), &[remote]), Err(OpError::Busy));
    assert_eq!(n.pending_requests(), 2);
}

#[test]
fn unanswered_requests_time_out() {
    let mut n = Node::new(cfg(2), NodeId(0)).unwrap();
    let remote = key_homed(2, 1);
    n.pull(Instant(0), WorkerId(1), Ticket(7), &[remote]).unwrap();
    assert_eq!(transmits(&mut n).len(), 1);
    let due = n.poll_timeout().unwrap();
    n.handle_timeout(Instant(due.0 - 1));
    assert!(events(&mut n).is_empty());
    n.handle_timeout(due + Duration::from_millis(2));
    let ev = events(&mut n);
    assert_eq!(ev.len(), 1);
    assert_eq!((ev[0].worker(), ev[0].ticket()), (WorkerId(1), Ticket(7)));
    assert_eq!(ev[0].result(), &Err(OpError::Timeout));
    assert_eq!(n.pending_requests(), 0);
    assert_eq!(n.poll_timeout(), None);
    // The late reply is counted and ignored.
    n.handle_message(
        Instant(1),
        NodeId(1),
        Message::PullReply { req: RequestId(1), keys: vec![remote], values: vec![0.0; 2] },
    );
    assert_eq!(n.stats().replies_late, 1);
    assert!(events(&mut n).is_empty());
}

#[test]
fn a_failed_peer_ends_every_wait() {
    let mut n = Node::new(cfg(3), NodeId(0)).unwrap();
    let now = Instant(0);
    n.pull(now, WorkerId(0), Ticket(1), &[key_homed(3, 1)]).unwrap();
    n.localize(now, WorkerId(1), Ticket(2), &[key_homed(3, 2)]).unwrap();
    let _ = transmits(&mut n);
    n.handle_peer_failed(now, NodeId(2));
    let ev = events(&mut n);
    assert_eq!(ev.len(), 2);
    assert!(ev.iter().all(|e| e.result() == &Err(OpError::PeerFailed { node: NodeId(2) })));
    assert!(n.is_idle());
    n.check_invariants().unwrap();
}

#[test]
fn forwarding_keeps_the_origin_and_counts_hops() {
    // Node 1 is asked for a key homed on node 2 that it does not hold: it forwards to the home
    // with the original origin, one hop further.
    let mut n = Node::new(cfg(3), NodeId(1)).unwrap();
    let k = key_homed(3, 2);
    n.handle_message(
        Instant(0),
        NodeId(0),
        Message::Pull { req: RequestId(4), origin: NodeId(0), hops: 0, keys: vec![k] },
    );
    let out = transmits(&mut n);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].to(), NodeId(2));
    assert_eq!(
        out[0].message(),
        &Message::Pull { req: RequestId(4), origin: NodeId(0), hops: 1, keys: vec![k] }
    );
    // At the hop limit, the origin gets an error instead of a loop.
    n.handle_message(
        Instant(0),
        NodeId(0),
        Message::Pull { req: RequestId(5), origin: NodeId(0), hops: HOPS_MAX, keys: vec![k] },
    );
    let out = transmits(&mut n);
    assert_eq!(out[0].to(), NodeId(0));
    assert!(matches!(out[0].message(), Message::RequestFailed { reason: wire::FailReason::RoutingLoop, .. }));
}

#[test]
fn a_relocation_round_trip_by_hand() {
    // Node 0 localizes a key homed on node 1: Localize → Relocate → OwnerUpdate → PointerRelease.
    let c = cfg(2);
    let mut a = Node::new(c.clone(), NodeId(0)).unwrap();
    let mut b = Node::new(c, NodeId(1)).unwrap();
    let k = key_homed(2, 1);
    let now = Instant(0);
    assert!(b.store().add(k, &[3.0, 4.0]));
    a.localize(now, WorkerId(0), Ticket(1), &[k]).unwrap();
    let t = transmits(&mut a);
    assert!(matches!(t[0].message(), Message::Localize { .. }));
    b.handle_frame(now, NodeId(0), &t[0].to_frame());
    assert_eq!(b.forwarding_pointers(), 1);
    let t = transmits(&mut b);
    assert!(matches!(t[0].message(), Message::Relocate { .. }));
    a.handle_frame(now, NodeId(1), &t[0].to_frame());
    let ev = events(&mut a);
    assert_eq!(ev[0].result(), &Ok(Completion::Localize));
    let mut v = [0.0; 2];
    assert!(a.store().read(k, &mut v));
    assert_eq!(v, [3.0, 4.0]);
    let t = transmits(&mut a);
    assert!(matches!(t[0].message(), Message::OwnerUpdate { .. }));
    b.handle_frame(now, NodeId(0), &t[0].to_frame());
    // The home (b) was also the old owner: it released its own pointer, nothing to send.
    assert_eq!(b.forwarding_pointers(), 0);
    assert!(transmits(&mut b).is_empty());
    a.check_invariants().unwrap();
    b.check_invariants().unwrap();
}

/// Requests that fail together (a peer failed, or their deadlines passed in one scan)
/// complete oldest first: the order of the workers' events is the same in every run, not
/// the order of a hash table.
#[test]
fn requests_failed_together_complete_oldest_first() {
    let tickets = |ev: &[Event]| ev.iter().map(|e| e.ticket().0).collect::<Vec<_>>();
    let all: Vec<u64> = (1..=40).collect();
    let issue = |n: &mut Node| {
        for t in &all {
            let key = key_homed(3, 1 + (*t % 2) as u16);
            n.pull(Instant(0), WorkerId((*t % 2) as u16), Ticket(*t), &[key]).unwrap();
        }
        let _ = transmits(n);
    };

    let mut n = Node::new(cfg(3), NodeId(0)).unwrap();
    issue(&mut n);
    n.handle_peer_failed(Instant(1), NodeId(2));
    let ev = events(&mut n);
    assert!(ev.iter().all(|e| e.result() == &Err(OpError::PeerFailed { node: NodeId(2) })));
    assert_eq!(tickets(&ev), all);

    let mut n = Node::new(cfg(3), NodeId(0)).unwrap();
    issue(&mut n);
    n.handle_timeout(Instant(0) + Duration::from_millis(20));
    let ev = events(&mut n);
    assert!(ev.iter().all(|e| e.result() == &Err(OpError::Timeout)));
    assert_eq!(tickets(&ev), all);
}

/// A barrier entered after peers failed names the first failed peer reported, the likeliest
/// cause of the others (a node that stops because it lost a peer names that peer in its
/// goodbye, and its transport reports that loss first), whatever the ids.
#[test]
fn the_barrier_names_the_first_failed_peer() {
    for round in 0..8u16 {
        let mut n = Node::new(cfg(64), NodeId(0)).unwrap();
        let failed: Vec<u16> = (0..6).map(|i| 63 - (round * 7 + i * 11) % 63).collect();
        for p in &failed {
            n.handle_peer_failed(Instant(0), NodeId(*p));
        }
        // Reported again later: still not the first.
        n.handle_peer_failed(Instant(0), NodeId(failed[3]));
        let first = NodeId(failed[0]);
        assert_eq!(n.barrier(Instant(0), WorkerId(0), Ticket(1)), Err(OpError::PeerFailed { node: first }));
        let mut sorted = failed.clone();
        sorted.sort_unstable();
        assert_eq!(n.failed_peers(), sorted.into_iter().map(NodeId).collect::<Vec<_>>());
    }
}

#[test]
fn requests_toward_a_known_failed_peer_fail_at_once() {
    let mut n = Node::new(cfg(3), NodeId(0)).unwrap();
    let now = Instant(0);
    n.handle_peer_failed(now, NodeId(2));
    n.pull(now, WorkerId(0), Ticket(1), &[key_homed(3, 2)]).unwrap();
    n.localize(now, WorkerId(1), Ticket(2), &[key_homed(3, 2)]).unwrap();
    let ev = events(&mut n);
    assert_eq!(ev.len(), 2);
    assert!(ev.iter().all(|e| e.result() == &Err(OpError::PeerFailed { node: NodeId(2) })));
    assert!(transmits(&mut n).is_empty());
    // A request of another node that would be forwarded to the failed peer goes back failed.
    let k = key_homed(3, 2);
    n.handle_message(
        now,
        NodeId(1),
        Message::Pull { req: RequestId(9), origin: NodeId(1), hops: 0, keys: vec![k] },
    );
    let out = transmits(&mut n);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].to(), NodeId(1));
    assert!(matches!(
        out[0].message(),
        Message::RequestFailed { reason: wire::FailReason::Unreachable { .. }, .. }
    ));
    assert!(n.is_idle());
    n.check_invariants().unwrap();
}

#[test]
fn the_barrier_releases_everyone_once_and_rejects_nothing() {
    let c = cfg(3);
    let mut nodes: Vec<Node> = (0..3).map(|i| Node::new(c.clone(), NodeId(i)).unwrap()).collect();
    let now = Instant(0);
    let mut ticket = 0;
    for round in 0..2 {
        for n in nodes.iter_mut() {
            for w in 0..2 {
                ticket += 1;
                n.barrier(now, WorkerId(w), Ticket(ticket)).unwrap();
            }
        }
        // Deliver until quiet.
        loop {
            let mut frames = Vec::new();
            for n in nodes.iter_mut() {
                for t in transmits(n) {
                    frames.push((n.id(), t.to(), t.to_frame()));
                }
            }
            if frames.is_empty() {
                break;
            }
            for (from, to, f) in frames {
                nodes[to.index()].handle_frame(now, from, &f);
            }
        }
        for n in nodes.iter_mut() {
            let ev = events(n);
            assert_eq!(ev.len(), 2, "round {round}, node {}", n.id());
            assert!(ev.iter().all(|e| e.result() == &Ok(Completion::Barrier)));
            assert_eq!(n.stats().messages_rejected, 0);
        }
    }
}

#[test]
fn a_worker_waiting_for_rounds_keeps_its_node_busy() {
    let mut n = Node::new(adaptive(2), NodeId(0)).unwrap();
    let mut now = Instant(0);
    n.wait_sync(now, WorkerId(0), Ticket(1)).unwrap();
    assert!(!n.is_idle(), "a waiting wait_sync is work in progress");
    // Rounds run on their timers; with no peer to ask, each ends at once.
    let mut done = Vec::new();
    for _ in 0..100 {
        done = events(&mut n);
        if !done.is_empty() {
            break;
        }
        assert!(!n.is_idle());
        now = n.poll_timeout().expect("a round or the waiter's deadline is due").max(now);
        n.handle_timeout(now);
        let _ = transmits(&mut n);
    }
    assert_eq!(done.len(), 1, "wait_sync completes once");
    assert_eq!(done[0].result(), &Ok(Completion::Sync));
    assert!(n.is_idle());
    n.check_invariants().unwrap();
}

#[test]
fn the_only_node_runs_rounds_only_while_a_worker_waits_for_them() {
    let mut n = Node::new(adaptive(1), NodeId(0)).unwrap();
    let mut now = Instant(0);
    // The first round runs at the first timer, and none is due after it.
    n.handle_timeout(now);
    assert_eq!(n.sync_rounds_done(), 1);
    assert_eq!(n.poll_timeout(), None);
    now = Instant(5_000);
    n.wait_sync(now, WorkerId(1), Ticket(7)).unwrap();
    let mut rounds = 0;
    while events(&mut n).is_empty() {
        let due = n.poll_timeout().expect("a round is due while the worker waits");
        assert!(due.saturating_since(now) <= n.config().sync_idle_interval, "rounds keep their pace");
        now = due.max(now);
        n.handle_timeout(now);
        rounds += 1;
        assert!(rounds <= 4, "wait_sync completes after two rounds");
    }
    assert_eq!(n.sync_rounds_done(), 3);
    assert_eq!(n.poll_timeout(), None, "no round once nobody waits");

    // With a staleness bound, a clock gate moves on with rounds: they keep running.
    let mut c = adaptive(1);
    c.gate = crate::config::Gate::Ssp { staleness: 1 };
    let mut n = Node::new(c, NodeId(0)).unwrap();
    n.handle_timeout(Instant(0));
    assert!(n.poll_timeout().is_some());
}

#[test]
fn a_slot_reserved_for_a_failed_owners_answer_goes_back() {
    let mut c = adaptive(3);
    c.timing = crate::action_timing::TimingParams { immediate: true, ..c.timing };
    let mut n = Node::new(c, NodeId(0)).unwrap();
    let key = key_homed(3, 2);
    let mut now = Instant(0);
    n.intent(now, WorkerId(0), &[key], Clock(0), Clock(5), IntentKind::ReadWrite).unwrap();
    // Rounds run until the start for the key is on its way to its home, node 2.
    let mut sent = false;
    for _ in 0..10 {
        now = n.poll_timeout().expect("rounds are due").max(now);
        n.handle_timeout(now);
        if transmits(&mut n).iter().any(|t| t.to() == NodeId(2)) {
            sent = true;
            break;
        }
    }
    assert!(sent, "the start was sent");
    assert_eq!(n.store().keys_held(), 1, "a slot is reserved for the key's main copy");
    n.handle_peer_failed(now, NodeId(2));
    // Later rounds give up on the key (its way leads through the failed node) and give the
    // slot back; so does the end of the intent.
    for _ in 0..10 {
        now = n.poll_timeout().expect("rounds are due").max(now);
        n.handle_timeout(now);
        let _ = transmits(&mut n);
        let _ = events(&mut n);
    }
    assert_eq!(n.store().keys_held(), 0, "the reservation went back");
    n.check_invariants().unwrap();
}

#[test]
fn a_peer_configured_differently_is_a_stranger() {
    let now = Instant(0);
    let base = cfg(2);
    let msg = Message::BarrierRelease { generation: 0 };
    let mut placement = base.clone();
    placement.placement = match base.placement {
        crate::Placement::Dense => crate::Placement::Hashed,
        _ => crate::Placement::Dense,
    };
    let mut technique = base.clone();
    technique.technique = crate::config::Technique::Adaptive;
    let mut layout = base.clone();
    layout.layout = Layout::uniform(65, 2).unwrap();
    let mut nodes = base.clone();
    nodes.nodes = 3;
    let mut hot = base.clone();
    hot.technique = crate::config::Technique::MultiTechnique;
    let mut hot_other = hot.clone();
    hot_other.hot_keys = alloc::sync::Arc::new([Key(1)].into_iter().collect());
    // Settings each node may choose for itself leave the cluster id alone.
    let mut own = base.clone();
    own.seed ^= 1;
    own.store_shards = 4;
    own.request_timeout = Duration::from_secs(1);
    assert_eq!(own.wire_cluster(), base.wire_cluster());
    for (what, peer) in
        [("placement", placement), ("technique", technique), ("layout", layout), ("nodes", nodes)]
    {
        assert_ne!(peer.wire_cluster(), base.wire_cluster(), "{what}");
        let mut n = Node::new(base.clone(), NodeId(0)).unwrap();
        n.handle_frame(now, NodeId(1), &msg.to_frame(peer.wire_cluster(), NodeId(1), MembershipEpoch::START));
        assert_eq!((n.stats().frames_rejected, n.stats().frames_foreign), (1, 1), "{what}");
    }
    assert_ne!(hot.wire_cluster(), hot_other.wire_cluster(), "hot keys");
    let mut n = Node::new(base.clone(), NodeId(0)).unwrap();
    n.handle_frame(now, NodeId(1), &msg.to_frame(own.wire_cluster(), NodeId(1), MembershipEpoch::START));
    assert_eq!(n.stats().frames_rejected, 0);
}

#[test]
fn frames_of_another_epoch_or_from_outside_the_membership_are_dropped_and_counted() {
    let mut n = Node::new(cfg(3), NodeId(0)).unwrap();
    let now = Instant(0);
    let cluster = n.config().wire_cluster();
    let key = key_homed(3, 0);
    let pull =
        |origin: u16| Message::Pull { req: RequestId(1), origin: NodeId(origin), hops: 0, keys: vec![key] };
    // Another epoch: no change has committed here, so neither an older nor a newer one is ours.
    for epoch in [1, u16::MAX] {
        n.handle_frame(now, NodeId(1), &pull(1).to_frame(cluster, NodeId(1), MembershipEpoch(epoch)));
    }
    assert_eq!((n.stats().frames_rejected, n.stats().frames_other_epoch), (2, 2));
    assert!(transmits(&mut n).is_empty() && events(&mut n).is_empty());
    // The epoch of the membership: answered, and the answer carries it.
    assert_eq!(n.membership_epoch(), MembershipEpoch::START);
    n.handle_frame(now, NodeId(1), &pull(1).to_frame(cluster, NodeId(1), MembershipEpoch::START));
    let t = transmits(&mut n);
    assert_eq!(t.len(), 1);
    assert!(matches!(t[0].message(), Message::PullReply { .. }));
    assert_eq!(t[0].to_frame()[14..16], [0, 0]);
    // A peer reported failed is outside the membership: its frames and messages are dropped,
    // whatever they say, and the others' are not.
    n.handle_peer_failed(now, NodeId(2));
    n.handle_frame(now, NodeId(2), &pull(2).to_frame(cluster, NodeId(2), MembershipEpoch::START));
    n.handle_message(now, NodeId(2), pull(2));
    assert_eq!((n.stats().frames_rejected, n.stats().from_non_members), (2, 2));
    assert!(transmits(&mut n).is_empty() && events(&mut n).is_empty());
    n.handle_frame(now, NodeId(1), &pull(1).to_frame(cluster, NodeId(1), MembershipEpoch::START));
    assert_eq!(transmits(&mut n).len(), 1);
    assert_eq!(n.stats().frames_rejected, 2);
    n.check_invariants().unwrap();
}

#[test]
fn tables_count_what_a_node_holds_and_the_peer_slots() {
    let mut n = Node::new(cfg(3), NodeId(0)).unwrap();
    let t = n.tables();
    assert_eq!((t.key_records, t.cold_records, t.pending_requests, t.holder_entries), (0, 0, 0, 0));
    assert_eq!(t.peer_slots, 6, "a flushed clock and a barrier entry per node");
    assert!(t.store_bytes > 0);
    // A localize of a key homed elsewhere: one request pending, the key incoming.
    n.localize(Instant(0), WorkerId(1), Ticket(2), &[key_homed(3, 2)]).unwrap();
    let after = n.tables();
    assert_eq!((after.pending_requests, after.cold_records), (1, 1));
    assert!(after.outbox_frames >= 1, "the request waits for the driver");
    let m = t.max(after);
    assert_eq!((m.pending_requests, m.peer_slots, m.cold_records), (1, 6, 1));
}

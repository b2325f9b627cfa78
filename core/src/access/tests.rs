use alloc::vec;
use alloc::vec::Vec;

use super::*;
use crate::config::Config;
use crate::ids::{Clock, NodeId};

#[test]
fn pulls_and_adds_commute_among_themselves_only() {
    let mut a = WorkerAccess::new(8);
    let (x, y) = (Key(1), Key(2));
    a.record(Ticket(1), vec![x], AccessKind::Pull);
    a.record(Ticket(2), vec![y], AccessKind::Add);
    assert!(!a.conflicts(&[x], AccessKind::Pull));
    assert!(a.conflicts(&[x], AccessKind::Add));
    assert!(a.conflicts(&[x], AccessKind::Set));
    assert!(!a.conflicts(&[y], AccessKind::Add));
    assert!(a.conflicts(&[y], AccessKind::Pull));
    assert!(!a.conflicts(&[x, y], AccessKind::Other));
    assert!(!a.conflicts(&[Key(3)], AccessKind::Set));
    assert_eq!(a.admit(&[y], AccessKind::Pull), Err(Hold::Overtakes));
    assert!(a.complete(Ticket(1)));
    assert!(!a.conflicts(&[x], AccessKind::Set));
    assert!(a.complete(Ticket(2)));
    assert!(!a.conflicts(&[y], AccessKind::Set));
    assert_eq!(a.outstanding(), 0);
    assert!(a.keys.is_empty());
}

#[test]
fn counts_nest_and_completing_twice_changes_nothing() {
    let mut a = WorkerAccess::new(8);
    a.record(Ticket(1), vec![Key(1)], AccessKind::Add);
    a.record(Ticket(2), vec![Key(1)], AccessKind::Add);
    assert!(a.complete(Ticket(1)));
    assert!(a.conflicts(&[Key(1)], AccessKind::Pull));
    assert!(!a.complete(Ticket(1)));
    assert!(a.conflicts(&[Key(1)], AccessKind::Pull));
    assert!(a.complete(Ticket(2)));
    assert!(!a.conflicts(&[Key(1)], AccessKind::Pull));
    assert!(!a.is_in_flight(Ticket(2)));
}

#[test]
fn the_bound_holds_every_kind() {
    let mut a = WorkerAccess::new(2);
    a.record(Ticket(1), Vec::new(), AccessKind::Other);
    assert_eq!(a.admit(&[Key(5)], AccessKind::Set), Ok(()));
    a.record(Ticket(2), vec![Key(5)], AccessKind::Set);
    assert_eq!(a.admit(&[Key(6)], AccessKind::Pull), Err(Hold::Full));
    assert_eq!(a.admit(&[Key(5)], AccessKind::Pull), Err(Hold::Overtakes));
    a.complete(Ticket(1));
    assert_eq!(a.admit(&[Key(6)], AccessKind::Pull), Ok(()));
}

#[test]
fn finalize_ends_intents_only_under_rounds() {
    assert_eq!(
        finalize_steps(Technique::StaticPartitioning, Gate::Async),
        &[FinalizeStep::Barrier, FinalizeStep::LastBarrier]
    );
    let steps = finalize_steps(Technique::Adaptive, Gate::Async);
    assert_eq!(steps.first(), Some(&FinalizeStep::EndIntents));
    assert_eq!(steps.last(), Some(&FinalizeStep::LastBarrier));
    assert!(steps.contains(&FinalizeStep::WaitSync));
    for t in Technique::ALL {
        let gated = finalize_steps(t, Gate::Bsp);
        assert_eq!(gated[0], FinalizeStep::Retire, "a gated worker retires first");
        assert_eq!(&gated[1..], finalize_steps(t, Gate::Async));
        assert!(!finalize_steps(t, Gate::Async).contains(&FinalizeStep::Retire));
    }
}

/// Node 0 of two, with keys 0..16 of 2 floats; which keys it holds depends on the placement.
fn node() -> Node {
    let cfg = Config::new(2, 1, Layout::uniform(16, 2).unwrap());
    Node::new(cfg, NodeId(0)).unwrap()
}

#[test]
fn a_pull_splits_into_local_and_distinct_remote_keys() {
    let mut n = node();
    let store = n.store().clone();
    let layout = n.config().layout.clone();
    let here: Vec<Key> = (0..16).map(Key).filter(|k| store.is_local(*k)).collect();
    let away: Vec<Key> = (0..16).map(Key).filter(|k| !store.is_local(*k)).collect();
    assert!(!here.is_empty() && !away.is_empty());
    let keys = [here[0], away[0], here[0], away[0]];
    let mut vals = vec![f32::NAN; 8];
    let mut a = WorkerAccess::new(4);
    assert_eq!(a.pull_fast(&store, &layout, &keys, &mut vals), 1);
    let m = a.split_pull(&store, &layout, &keys, &mut vals, 1, true);
    assert_eq!((m.keys(), m.local()), (&[away[0]][..], 2));
    assert_eq!(m.positions().collect::<Vec<_>>(), [1, 3]);
    m.fill(&[7.0, 8.0], &mut vals).unwrap();
    assert_eq!(vals, [0.0, 0.0, 7.0, 8.0, 0.0, 0.0, 7.0, 8.0]);
    assert_eq!(m.fill(&[7.0], &mut vals), Err(OpError::InvalidArgument));

    // Through the node: the miss is a pull command, recorded; a push to it waits.
    let issued = a.pull_via(&mut n, Instant(0), WorkerId(0), Ticket(9), &keys, &mut vals, true).unwrap();
    assert!(matches!(issued, Issue::Sent(_)));
    assert!(a.is_in_flight(Ticket(9)));
    let held =
        a.write_via(&mut n, Instant(0), WorkerId(0), Ticket(10), WriteKind::Add, &away[..1], &[1.0; 2], true);
    assert!(matches!(held, Ok(Issue::Held(Hold::Overtakes))));
    assert!(!a.is_in_flight(Ticket(10)));
    // A local key does not wait, and an invalid call is refused before anything.
    let local =
        a.write_via(&mut n, Instant(0), WorkerId(0), Ticket(11), WriteKind::Add, &here[..1], &[1.0; 2], true);
    assert!(matches!(local, Ok(Issue::Local(WriteMisses { local: 1, .. }))));
    let bad = a.pull_via(&mut n, Instant(0), WorkerId(0), Ticket(12), &[Key(99)], &mut [0.0; 2], true);
    assert_eq!(bad.err(), Some(OpError::KeyOutsideLayout { key: Key(99) }));
}

#[test]
fn a_localize_asks_the_node_for_each_key_held_elsewhere_once() {
    let mut cfg = Config::new(2, 1, Layout::uniform(16, 2).unwrap());
    cfg.technique = Technique::Relocation;
    let mut n = Node::new(cfg, NodeId(0)).unwrap();
    let store = n.store().clone();
    let here: Vec<Key> = (0..16).map(Key).filter(|k| store.holds(*k)).collect();
    let away: Vec<Key> = (0..16).map(Key).filter(|k| !store.holds(*k)).collect();
    assert!(here.len() >= 2 && away.len() >= 2);
    let mut a = WorkerAccess::new(4);
    let keys = [away[0], here[0], away[0], away[1], here[1]];
    assert_eq!(a.split_localize(&store, Technique::Relocation, &keys, true), [away[0], away[1]]);
    assert_eq!(
        a.split_localize(&store, Technique::Relocation, &keys, false),
        [away[0], here[0], away[1], here[1]]
    );
    // A technique that does not move keys on request needs no node.
    assert!(a.split_localize(&store, Technique::StaticPartitioning, &keys, true).is_empty());

    // Through the node: only keys held here complete in the call, with nothing in flight.
    let local = a.localize_via(&mut n, Instant(0), WorkerId(0), Ticket(1), &here, true).unwrap();
    assert!(matches!(local, Issue::Local(ref k) if k.is_empty()));
    assert_eq!(a.outstanding(), 0);
    let sent = a.localize_via(&mut n, Instant(0), WorkerId(0), Ticket(2), &keys, true).unwrap();
    assert!(matches!(sent, Issue::Sent(ref k) if k[..] == [away[0], away[1]]));
    assert!(a.is_in_flight(Ticket(2)));
    let bad = a.localize_via(&mut n, Instant(0), WorkerId(0), Ticket(3), &[Key(16)], true);
    assert_eq!(bad.err(), Some(OpError::KeyOutsideLayout { key: Key(16) }));
}

#[test]
fn a_write_sums_the_deltas_of_a_repeated_remote_key_and_keeps_the_last_set() {
    let n = node();
    let store = n.store().clone();
    let layout = n.config().layout.clone();
    let away = (0..16).map(Key).find(|k| !store.is_local(*k)).unwrap();
    let here = (0..16).map(Key).find(|k| store.is_local(*k)).unwrap();
    let mut a = WorkerAccess::new(4);
    let keys = [away, here, away];
    let vals = [1.0, 2.0, 5.0, 5.0, 3.0, 4.0];
    let m = a.split_write(&store, &layout, &keys, &vals, WriteKind::Add, true);
    assert_eq!((m.keys.as_slice(), m.values.as_slice(), m.local), (&[away][..], &[4.0, 6.0][..], 1));
    let mut v = [0.0; 2];
    assert!(store.read(here, &mut v));
    assert_eq!(v, [5.0, 5.0]);
    let m = a.split_write(&store, &layout, &keys, &vals, WriteKind::Set, false);
    assert_eq!(
        (m.keys.as_slice(), m.values.as_slice(), m.local),
        (&[away, here][..], &[3.0, 4.0, 5.0, 5.0][..], 0)
    );
}

/// Frames in flight between two nodes, per direction, delivered one at a time.
struct Pair {
    nodes: [Node; 2],
    queues: [alloc::collections::VecDeque<Vec<u8>>; 2],
    events: Vec<(WorkerId, Ticket)>,
}

impl Pair {
    fn drain(&mut self, i: usize) {
        while let Some(t) = self.nodes[i].poll_transmit() {
            self.queues[i].push_back(t.to_frame());
        }
        while let Some(ev) = self.nodes[i].poll_event() {
            let (w, t, r) = ev.into_parts();
            assert!(r.is_ok(), "{t:?}: {r:?}");
            self.events.push((w, t));
        }
    }

    /// Delivers the oldest frame from node `from` to the other node.
    fn deliver(&mut self, from: usize) {
        let f = self.queues[from].pop_front().expect("a frame in flight");
        self.nodes[1 - from].handle_frame(Instant(0), NodeId(from as u16), &f);
        self.drain(1 - from);
    }
}

/// The race the ordering rule exists for: a worker's add goes to the key's owner right
/// behind its node's sync request that starts intent for the key; the owner answers by moving
/// the key here, then forwards the add after it. While the add is on its way the key is here
/// already, and a local pull would miss the worker's own add: the access path holds it until
/// the add completed.
#[test]
fn a_pull_waits_for_its_own_add_that_follows_the_key() {
    let mut cfg = Config::new(2, 2, Layout::uniform(16, 2).unwrap());
    cfg.technique = Technique::Adaptive;
    cfg.timing.immediate = true;
    let nodes = [Node::new(cfg.clone(), NodeId(0)).unwrap(), Node::new(cfg, NodeId(1)).unwrap()];
    let k = (0..16).map(Key).find(|k| nodes[1].store().holds(*k)).unwrap();
    let mut p = Pair { nodes, queues: Default::default(), events: Vec::new() };
    let (w0, w1) = (WorkerId(0), WorkerId(1));
    let mut path = WorkerAccess::new(4);

    // Worker 1 signals intent for the key and a sync round tells its owner; worker 0 adds to
    // it, remotely, behind that round's request.
    p.nodes[0].intent(Instant(0), w1, &[k], Clock(0), Clock(5), crate::node::IntentKind::ReadWrite).unwrap();
    let now = p.nodes[0].poll_timeout().unwrap_or(Instant(0));
    p.nodes[0].handle_timeout(now);
    p.drain(0);
    assert!(!p.queues[0].is_empty(), "the round's request");
    let add = path.write_via(&mut p.nodes[0], now, w0, Ticket(2), WriteKind::Add, &[k], &[1.0; 2], true);
    assert!(matches!(add, Ok(Issue::Sent(_))));
    p.drain(0);
    // The owner hands the key over, then forwards the add after it.
    while !p.queues[0].is_empty() {
        p.deliver(0);
    }
    p.deliver(1);
    assert!(p.nodes[0].store().holds(k), "the key arrived first");
    let mut v = [0.0; 2];
    assert!(p.nodes[0].store().read(k, &mut v));
    assert_eq!(v, [0.0; 2], "the add is still on its way");

    // The pull does not overtake the add ...
    let pull = path.pull_via(&mut p.nodes[0], now, w0, Ticket(3), &[k], &mut v, true);
    assert!(matches!(pull, Ok(Issue::Held(Hold::Overtakes))));
    // ... which completes once it arrived; then the pull reads it, locally.
    while !p.queues[1].is_empty() || !p.queues[0].is_empty() {
        if !p.queues[1].is_empty() {
            p.deliver(1);
        } else {
            p.deliver(0);
        }
    }
    assert!(p.events.contains(&(w0, Ticket(2))));
    assert!(path.complete(Ticket(2)));
    let pull = path.pull_via(&mut p.nodes[0], now, w0, Ticket(4), &[k], &mut v, true);
    assert!(matches!(pull, Ok(Issue::Local(_))));
    assert_eq!(v, [1.0; 2]);
}

//! The gates on hand-delivered messages: who waits for what, and what ends a wait.

use alloc::vec;
use alloc::vec::Vec;

use super::super::{Completion, Event, Node};
use crate::config::{Config, Gate, Technique};
use crate::error::OpError;
use crate::ids::{Key, NodeId, Ticket, WorkerId};
use crate::layout::Layout;
use crate::time::Instant;
use crate::wire::{Message, WriteKind};

pub(in crate::node) const W: WorkerId = WorkerId(0);

pub(in crate::node) fn cluster(nodes: u16, gate: Gate, technique: Technique) -> Vec<Node> {
    let mut c = Config::new(nodes, 1, Layout::uniform(64, 2).unwrap());
    c.gate = gate;
    c.technique = technique;
    (0..nodes).map(|n| Node::new(c.clone(), NodeId(n)).unwrap()).collect()
}

pub(in crate::node) fn key_homed(nodes: &[Node], home: u16) -> Key {
    (0..64).map(Key).find(|k| nodes[0].home(*k) == NodeId(home)).unwrap()
}

/// Delivers every message until none is left; returns how many went.
pub(in crate::node) fn deliver(nodes: &mut [Node], now: Instant) -> usize {
    let mut sent = 0;
    loop {
        let mut batch = Vec::new();
        for n in nodes.iter_mut() {
            let from = n.id();
            while let Some(t) = n.poll_transmit() {
                batch.push((from, t.to, t.msg));
            }
        }
        if batch.is_empty() {
            return sent;
        }
        sent += batch.len();
        for (from, to, msg) in batch {
            nodes[to.index()].handle_message(now, from, msg);
        }
    }
}

pub(in crate::node) fn passed(n: &mut Node) -> Vec<(Ticket, Result<Completion, OpError>)> {
    core::iter::from_fn(|| n.poll_event()).map(Event::into_parts).map(|(_, t, r)| (t, r)).collect()
}

pub(in crate::node) fn gate_passes(n: &mut Node, now: Instant, t: u64) -> bool {
    n.gate(now, W, Ticket(t)).unwrap();
    let got = passed(n);
    assert!(got.len() <= 1, "{got:?}");
    got.first().is_some_and(|(ticket, r)| *ticket == Ticket(t) && *r == Ok(Completion::Gate))
}

#[test]
fn async_never_waits_and_refuses_flushed_clocks() {
    let mut nodes = cluster(2, Gate::Async, Technique::StaticPartitioning);
    let now = Instant(0);
    for _ in 0..5 {
        nodes[0].advance_clock(now, W).unwrap();
    }
    assert!(gate_passes(&mut nodes[0], now, 1));
    assert_eq!(deliver(&mut nodes, now), 0, "async sends no flushed clocks");
    nodes[0].handle_message(now, NodeId(1), Message::Flushed { clock: 3 });
    assert_eq!(nodes[0].stats().messages_rejected, 1);
}

#[test]
fn bsp_waits_for_every_worker_to_finish_the_clock_before() {
    let mut nodes = cluster(2, Gate::Bsp, Technique::StaticPartitioning);
    let now = Instant(0);
    assert!(gate_passes(&mut nodes[0], now, 1), "clock 0 waits for nothing");
    nodes[0].advance_clock(now, W).unwrap();
    assert!(!gate_passes(&mut nodes[0], now, 2), "node 1 is still at clock 0");
    deliver(&mut nodes, now);
    assert!(passed(&mut nodes[0]).is_empty());
    nodes[1].advance_clock(now, W).unwrap();
    deliver(&mut nodes, now);
    assert_eq!(passed(&mut nodes[0]), vec![(Ticket(2), Ok(Completion::Gate))]);
    assert_eq!(nodes[0].flushed_clock(), 1);
    assert!(gate_passes(&mut nodes[1], now, 3));
}

#[test]
fn ssp_lets_a_worker_run_ahead_by_its_bound_and_no_more() {
    let mut nodes = cluster(2, Gate::Ssp { staleness: 2 }, Technique::StaticPartitioning);
    let now = Instant(0);
    for c in 1..=2 {
        nodes[0].advance_clock(now, W).unwrap();
        assert!(gate_passes(&mut nodes[0], now, c), "clock {c} is within the bound");
    }
    nodes[0].advance_clock(now, W).unwrap();
    assert!(!gate_passes(&mut nodes[0], now, 3), "clock 3 needs node 1's clock 0 flushed");
    nodes[1].advance_clock(now, W).unwrap();
    deliver(&mut nodes, now);
    assert_eq!(passed(&mut nodes[0]), vec![(Ticket(3), Ok(Completion::Gate))]);
}

#[test]
fn an_unanswered_write_holds_the_flushed_clock_back() {
    let mut nodes = cluster(2, Gate::Bsp, Technique::StaticPartitioning);
    let now = Instant(0);
    let remote = key_homed(&nodes, 1);
    nodes[0].push(now, W, Ticket(1), WriteKind::Add, &[remote], &[1.0, 1.0]).unwrap();
    nodes[0].advance_clock(now, W).unwrap();
    nodes[1].advance_clock(now, W).unwrap();
    // Node 1's flushed clock goes out; node 0's push is not delivered yet.
    let from1: Vec<_> = core::iter::from_fn(|| nodes[1].poll_transmit()).collect();
    for t in from1 {
        nodes[0].handle_message(now, NodeId(1), t.msg);
    }
    assert!(!gate_passes(&mut nodes[0], now, 2), "its own push at clock 0 is not applied yet");
    assert!(!gate_passes(&mut nodes[1], now, 3));
    deliver(&mut nodes, now);
    let got = passed(&mut nodes[0]);
    assert!(
        got.contains(&(Ticket(1), Ok(Completion::Write))) && got.contains(&(Ticket(2), Ok(Completion::Gate)))
    );
    assert_eq!(passed(&mut nodes[1]), vec![(Ticket(3), Ok(Completion::Gate))]);
    let mut v = Vec::new();
    assert!(nodes[1].store().read_append(remote, &mut v));
    assert_eq!(v, vec![1.0, 1.0], "the write is at the main copy before anyone passes");
}

#[test]
fn bounded_delay_waits_for_the_workers_own_old_requests_only() {
    let mut nodes = cluster(2, Gate::BoundedDelay { delay: 1 }, Technique::StaticPartitioning);
    let now = Instant(0);
    let remote = key_homed(&nodes, 1);
    nodes[0].pull(now, W, Ticket(1), &[remote]).unwrap();
    nodes[0].advance_clock(now, W).unwrap();
    assert!(gate_passes(&mut nodes[0], now, 2), "a request one clock old is within τ = 1");
    nodes[0].advance_clock(now, W).unwrap();
    assert!(!gate_passes(&mut nodes[0], now, 3), "two clocks old is not");
    deliver(&mut nodes, now);
    let got = passed(&mut nodes[0]);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[1], (Ticket(3), Ok(Completion::Gate)));
    // Node 1 never advanced, and nobody waits for it.
    for c in 4..8 {
        nodes[0].advance_clock(now, W).unwrap();
        assert!(gate_passes(&mut nodes[0], now, c));
    }
}

#[test]
fn a_failed_peer_ends_the_waits_and_refuses_new_ones() {
    let mut nodes = cluster(3, Gate::Bsp, Technique::StaticPartitioning);
    let now = Instant(0);
    nodes[0].advance_clock(now, W).unwrap();
    assert!(!gate_passes(&mut nodes[0], now, 1));
    nodes[0].handle_peer_failed(now, NodeId(2));
    assert_eq!(passed(&mut nodes[0]), vec![(Ticket(1), Err(OpError::PeerFailed { node: NodeId(2) }))]);
    assert_eq!(nodes[0].gate(now, W, Ticket(2)), Err(OpError::PeerFailed { node: NodeId(2) }));
    while nodes[0].poll_transmit().is_some() {}
    assert!(nodes[0].is_idle());
}

#[test]
fn a_retired_worker_is_not_waited_for() {
    let mut nodes = cluster(2, Gate::Bsp, Technique::StaticPartitioning);
    let now = Instant(0);
    nodes[0].advance_clock(now, W).unwrap();
    assert!(!gate_passes(&mut nodes[0], now, 1));
    nodes[1].retire(now, W).unwrap();
    deliver(&mut nodes, now);
    assert_eq!(passed(&mut nodes[0]), vec![(Ticket(1), Ok(Completion::Gate))]);
    assert_eq!(nodes[0].flushed_clock(), 1);
    assert_eq!(nodes[1].retire(now, WorkerId(1)), Err(OpError::InvalidArgument));
    assert_eq!(nodes[1].gate(now, WorkerId(1), Ticket(9)), Err(OpError::InvalidArgument));
}

#[test]
fn a_second_wait_of_the_same_worker_ends_the_first() {
    let mut nodes = cluster(2, Gate::Bsp, Technique::StaticPartitioning);
    let now = Instant(0);
    nodes[0].advance_clock(now, W).unwrap();
    assert!(!gate_passes(&mut nodes[0], now, 1));
    nodes[0].gate(now, W, Ticket(2)).unwrap();
    assert_eq!(passed(&mut nodes[0]), vec![(Ticket(1), Err(OpError::Timeout))]);
    nodes[1].advance_clock(now, W).unwrap();
    deliver(&mut nodes, now);
    assert_eq!(passed(&mut nodes[0]), vec![(Ticket(2), Ok(Completion::Gate))]);
}

/// Runs one round (or whatever its timers hold) on each node of `which`, `now` moved on first.
pub(in crate::node) fn rounds(nodes: &mut [Node], which: &[usize], now: &mut Instant) {
    *now = *now + crate::time::Duration::from_millis(5);
    for &i in which {
        nodes[i].handle_timeout(*now);
    }
    deliver(nodes, *now);
}

#[test]
fn with_replicas_a_round_after_the_flush_must_end_before_a_worker_passes() {
    let mut nodes = cluster(2, Gate::Bsp, Technique::FullReplication);
    let mut now = Instant(0);
    for _ in 0..4 {
        rounds(&mut nodes, &[0, 1], &mut now);
    }
    let k0 = key_homed(&nodes, 0);
    let read = |n: &Node| {
        let mut v = Vec::new();
        assert!(n.store().read_append(k0, &mut v));
        v
    };
    // Node 1 finishes clock 0 and flushes it (its round refreshes its replica of k0: 0).
    nodes[1].advance_clock(now, W).unwrap();
    rounds(&mut nodes, &[1], &mut now);
    // Node 0 adds to k0's main copy, finishes clock 0 and flushes it.
    nodes[0].push(now, W, Ticket(1), WriteKind::Add, &[k0], &[2.0, 2.0]).unwrap();
    assert_eq!(passed(&mut nodes[0]), vec![(Ticket(1), Ok(Completion::Write))]);
    nodes[0].advance_clock(now, W).unwrap();
    rounds(&mut nodes, &[0], &mut now);
    assert_eq!(nodes[1].flushed_clock(), 1, "node 1 knows that every update of clock 0 is applied");
    assert_eq!(read(&nodes[1]), vec![0.0, 0.0], "but its replica of k0 predates the add");
    assert!(!gate_passes(&mut nodes[1], now, 2), "a read now would miss the add of clock 0");
    rounds(&mut nodes, &[1], &mut now);
    assert_eq!(passed(&mut nodes[1]), vec![(Ticket(2), Ok(Completion::Gate))]);
    assert_eq!(read(&nodes[1]), vec![2.0, 2.0]);
    // Node 0 too learned the global clock only after its last round started.
    assert!(!gate_passes(&mut nodes[0], now, 3));
    rounds(&mut nodes, &[0], &mut now);
    assert_eq!(passed(&mut nodes[0]), vec![(Ticket(3), Ok(Completion::Gate))]);
}

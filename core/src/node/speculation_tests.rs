//! SparseSSP's speculation on hand-delivered messages.

use alloc::vec;
use alloc::vec::Vec;

use super::super::gate::tests::{cluster, deliver, gate_passes, key_homed, passed, rounds, W};
use super::super::{Completion, Node};
use crate::config::{Config, Gate, Technique};
use crate::error::OpError;
use crate::ids::{Clock, Key, NodeId, Ticket};
use crate::layout::Layout;
use crate::node::IntentKind;
use crate::time::Instant;
use crate::wire::{Kind, Message, WriteKind};

const NOW: Instant = Instant(0);

/// SparseSSP with staleness 0 and speculation 2.
fn sparse(nodes: u16, technique: Technique) -> Vec<Node> {
    cluster(nodes, Gate::SparseSsp { staleness: 0, speculation: 2 }, technique)
}

fn declare(n: &mut Node, keys: &[Key], start: u64, end: u64) {
    n.intent(NOW, W, keys, Clock(start), Clock(end), IntentKind::ReadWrite).unwrap();
}

#[test]
fn a_worker_runs_ahead_on_keys_that_the_workers_behind_did_not_declare() {
    let mut nodes = sparse(2, Technique::StaticPartitioning);
    let (a, b) = (Key(1), Key(2));
    declare(&mut nodes[1], &[a], 0, 10);
    declare(&mut nodes[0], &[b], 0, 10);
    nodes[0].advance_clock(NOW, W).unwrap();
    assert!(
        gate_passes(&mut nodes[0], NOW, 1),
        "nothing is declared for clock 1 two clocks ahead: SSP(2) holds"
    );
    nodes[0].advance_clock(NOW, W).unwrap();
    assert!(!gate_passes(&mut nodes[0], NOW, 2), "node 1's answer is due first");
    deliver(&mut nodes, NOW);
    assert_eq!(passed(&mut nodes[0]), vec![(Ticket(2), Ok(Completion::Gate))]);
    assert_eq!(nodes[0].stats().gates_speculated, 2, "clocks 1 and 2");
    nodes[0].advance_clock(NOW, W).unwrap();
    assert!(!gate_passes(&mut nodes[0], NOW, 3), "three clocks ahead of node 1 is beyond s + p");
    deliver(&mut nodes, NOW);
    assert_eq!(passed(&mut nodes[0]), vec![]);
    nodes[1].advance_clock(NOW, W).unwrap();
    deliver(&mut nodes, NOW);
    assert_eq!(passed(&mut nodes[0]), vec![(Ticket(3), Ok(Completion::Gate))]);
}

#[test]
fn a_key_declared_behind_holds_the_worker_at_the_staleness_bound() {
    let mut nodes = sparse(2, Technique::StaticPartitioning);
    let b = Key(2);
    declare(&mut nodes[1], &[b], 1, 2);
    declare(&mut nodes[0], &[b], 0, 10);
    nodes[0].advance_clock(NOW, W).unwrap();
    assert!(gate_passes(&mut nodes[0], NOW, 1));
    nodes[0].advance_clock(NOW, W).unwrap();
    assert!(!gate_passes(&mut nodes[0], NOW, 2));
    deliver(&mut nodes, NOW);
    assert_eq!(passed(&mut nodes[0]), vec![], "node 1 may still update b at clock 1");
    assert_eq!(nodes[0].stats().speculations_conflicted, 1);
    nodes[1].advance_clock(NOW, W).unwrap();
    deliver(&mut nodes, NOW);
    assert_eq!(passed(&mut nodes[0]), vec![], "asked again at global clock 1: b at clock 1 still counts");
    nodes[1].advance_clock(NOW, W).unwrap();
    deliver(&mut nodes, NOW);
    assert_eq!(passed(&mut nodes[0]), vec![(Ticket(2), Ok(Completion::Gate))], "SSP(0) holds now");
}

#[test]
fn a_declaration_made_too_late_protects_nothing_and_asks_nobody() {
    let mut nodes = sparse(2, Technique::StaticPartitioning);
    nodes[0].advance_clock(NOW, W).unwrap();
    // Signaled at clock 1 for clock 2: less than p = 2 clocks ahead.
    declare(&mut nodes[0], &[Key(2)], 2, 3);
    nodes[0].advance_clock(NOW, W).unwrap();
    assert!(gate_passes(&mut nodes[0], NOW, 2), "no declared key: SSP(s + p) is all it waits for");
    deliver(&mut nodes, NOW);
    assert_eq!(nodes[0].stats().messages_sent[Kind::Speculate as usize], 0);
}

#[test]
fn an_unanswered_write_behind_is_a_conflict_until_it_is_applied() {
    let mut nodes = sparse(2, Technique::StaticPartitioning);
    let b = key_homed(&nodes, 0);
    declare(&mut nodes[1], &[b], 0, 1);
    declare(&mut nodes[0], &[b], 2, 3);
    nodes[1].push(NOW, W, Ticket(7), WriteKind::Add, &[b], &[1.0, 1.0]).unwrap();
    nodes[1].advance_clock(NOW, W).unwrap();
    // Node 1's flushed clock goes out (still 0: its write is unanswered), its push does not.
    let out: Vec<_> = core::iter::from_fn(|| nodes[1].poll_transmit()).collect();
    let (push, rest): (Vec<_>, Vec<_>) = out.into_iter().partition(|t| matches!(t.msg, Message::Push { .. }));
    for t in rest {
        nodes[0].handle_message(NOW, NodeId(1), t.msg);
    }
    nodes[0].advance_clock(NOW, W).unwrap();
    assert!(gate_passes(&mut nodes[0], NOW, 1));
    nodes[0].advance_clock(NOW, W).unwrap();
    assert!(!gate_passes(&mut nodes[0], NOW, 2));
    deliver(&mut nodes, NOW);
    assert_eq!(passed(&mut nodes[0]), vec![], "the add of clock 0 is not at b's main copy");
    for t in push {
        nodes[0].handle_message(NOW, NodeId(1), t.msg);
    }
    deliver(&mut nodes, NOW);
    assert_eq!(passed(&mut nodes[0]), vec![(Ticket(2), Ok(Completion::Gate))]);
    let mut v = Vec::new();
    assert!(nodes[0].store().read_append(b, &mut v));
    assert_eq!(v, vec![1.0, 1.0]);
}

#[test]
fn a_refused_declaration_makes_every_speculation_a_conflict() {
    let mut c = Config::new(2, 1, Layout::uniform(64, 2).unwrap());
    c.gate = Gate::SparseSsp { staleness: 0, speculation: 1 };
    c.intent_keys_max = 2;
    let mut nodes: Vec<Node> = (0..2).map(|n| Node::new(c.clone(), NodeId(n)).unwrap()).collect();
    declare(&mut nodes[0], &[Key(5)], 0, 10);
    let refused =
        nodes[1].intent(NOW, W, &[Key(1), Key(3), Key(4)], Clock(0), Clock(4), IntentKind::ReadWrite);
    assert_eq!(refused, Err(OpError::Busy));
    nodes[0].advance_clock(NOW, W).unwrap();
    assert!(!gate_passes(&mut nodes[0], NOW, 1));
    deliver(&mut nodes, NOW);
    assert_eq!(passed(&mut nodes[0]), vec![], "node 1's worker may update key 5 unannounced");
    assert_eq!(nodes[0].stats().speculations_conflicted, 1);
}

#[test]
fn with_replicas_a_round_after_the_answers_must_end_before_a_speculation_passes() {
    let mut nodes = sparse(2, Technique::FullReplication);
    let mut now = NOW;
    for _ in 0..4 {
        rounds(&mut nodes, &[0, 1], &mut now);
    }
    let b = key_homed(&nodes, 1);
    declare(&mut nodes[0], &[b], 0, 10);
    nodes[0].advance_clock(now, W).unwrap();
    nodes[0].advance_clock(now, W).unwrap();
    assert!(!gate_passes(&mut nodes[0], now, 1));
    deliver(&mut nodes, now);
    assert_eq!(passed(&mut nodes[0]), vec![], "answered, but node 0's replica of b predates the answer");
    rounds(&mut nodes, &[0], &mut now);
    assert_eq!(passed(&mut nodes[0]), vec![(Ticket(1), Ok(Completion::Gate))]);
}

#[test]
fn speculation_messages_are_checked() {
    let mut nodes = cluster(2, Gate::Ssp { staleness: 1 }, Technique::StaticPartitioning);
    nodes[0].handle_message(NOW, NodeId(1), Message::Speculate { query: 1, below: 3, keys: vec![Key(1)] });
    nodes[0].handle_message(NOW, NodeId(1), Message::SpeculateReply { query: 1, clear: true });
    assert_eq!(nodes[0].stats().messages_rejected, 2, "not under SparseSSP");
    let mut nodes = sparse(2, Technique::StaticPartitioning);
    nodes[0].handle_message(NOW, NodeId(1), Message::Speculate { query: 1, below: 3, keys: vec![Key(64)] });
    assert_eq!(nodes[0].stats().messages_rejected, 1, "a key outside the layout");
    assert!(nodes[0].poll_transmit().is_none());
    nodes[0].handle_message(NOW, NodeId(1), Message::SpeculateReply { query: 77, clear: false });
    assert_eq!(nodes[0].stats().messages_rejected, 1, "an answer to no speculation is late, not wrong");
    assert_eq!(nodes[0].stats().speculations_conflicted, 0);
}

#[test]
fn a_worker_behind_on_the_same_node_is_checked_there() {
    let mut c = Config::new(1, 2, Layout::uniform(64, 2).unwrap());
    c.gate = Gate::SparseSsp { staleness: 0, speculation: 2 };
    c.technique = Technique::StaticPartitioning;
    let mut n = Node::new(c, NodeId(0)).unwrap();
    let (fast, slow) = (W, crate::ids::WorkerId(1));
    let (a, b) = (Key(1), Key(2));
    n.intent(NOW, slow, &[a], Clock(0), Clock(1), IntentKind::ReadWrite).unwrap();
    n.intent(NOW, slow, &[b], Clock(2), Clock(3), IntentKind::ReadWrite).unwrap();
    n.intent(NOW, fast, &[a, b], Clock(0), Clock(4), IntentKind::ReadWrite).unwrap();
    n.advance_clock(NOW, fast).unwrap();
    n.advance_clock(NOW, fast).unwrap();
    n.gate(NOW, fast, Ticket(1)).unwrap();
    assert_eq!(passed(&mut n), vec![], "the slow worker may still update a at clock 0");
    n.advance_clock(NOW, slow).unwrap();
    assert_eq!(passed(&mut n), vec![(Ticket(1), Ok(Completion::Gate))], "asked again once it moved on");
    // Its own intents and updates are no conflict: the reader sees them in the store.
    n.advance_clock(NOW, fast).unwrap();
    n.gate(NOW, fast, Ticket(2)).unwrap();
    assert_eq!(passed(&mut n), vec![], "the slow worker will update b at clock 2");
    n.advance_clock(NOW, slow).unwrap();
    assert_eq!(passed(&mut n), vec![]);
    n.advance_clock(NOW, slow).unwrap();
    assert_eq!(passed(&mut n), vec![(Ticket(2), Ok(Completion::Gate))]);
    assert_eq!(n.stats().gates_speculated, 1);
}

#[test]
fn one_node_with_replica_techniques_still_passes() {
    let mut c = Config::new(1, 2, Layout::uniform(64, 2).unwrap());
    c.gate = Gate::Bsp;
    let mut n = Node::new(c, NodeId(0)).unwrap();
    n.advance_clock(NOW, W).unwrap();
    n.gate(NOW, W, Ticket(1)).unwrap();
    n.advance_clock(NOW, crate::ids::WorkerId(1)).unwrap();
    let mut now = NOW;
    for _ in 0..5 {
        now = now + crate::time::Duration::from_millis(5);
        n.handle_timeout(now);
    }
    assert_eq!(passed(&mut n), vec![(Ticket(1), Ok(Completion::Gate))]);
}

#[test]
fn the_next_clock_is_asked_about_ahead_so_the_answers_wait_for_the_worker() {
    let mut nodes = sparse(2, Technique::StaticPartitioning);
    declare(&mut nodes[1], &[Key(1)], 0, 10);
    declare(&mut nodes[0], &[Key(2)], 0, 10);
    nodes[0].advance_clock(NOW, W).unwrap();
    assert!(gate_passes(&mut nodes[0], NOW, 1));
    // Passing clock 1 asked node 1 about clock 2 already.
    deliver(&mut nodes, NOW);
    assert_eq!(nodes[0].stats().messages_sent[Kind::Speculate as usize], 1);
    nodes[0].advance_clock(NOW, W).unwrap();
    assert!(gate_passes(&mut nodes[0], NOW, 2), "the answer was in");
    assert_eq!(nodes[0].stats().messages_sent[Kind::Speculate as usize], 1);
}

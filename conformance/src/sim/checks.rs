//! Cluster-wide invariants, checked from the outside through the nodes' getters. Kept apart
//! from the code under test on purpose.

use parma_core::{Key, Node};

/// Every node's own consistency check.
pub fn node_invariants(nodes: &[Node]) -> Result<(), String> {
    for n in nodes {
        n.check_invariants().map_err(|v| format!("node {}: {v}", n.id()))?;
    }
    Ok(())
}

/// No key has two main copies (one may be in flight: zero is fine mid-run).
pub fn at_most_one_copy(nodes: &[Node], keys: u64) -> Result<(), String> {
    for k in 0..keys {
        let holders: Vec<_> = nodes.iter().filter(|n| n.store().holds(Key(k))).map(|n| n.id()).collect();
        if holders.len() > 1 {
            return Err(format!("key {k} has main copies on nodes {holders:?}"));
        }
    }
    Ok(())
}

/// Every key has exactly one main copy (after quiescence, nothing is in flight).
pub fn exactly_one_copy(nodes: &[Node], keys: u64) -> Result<(), String> {
    for k in 0..keys {
        let holders = nodes.iter().filter(|n| n.store().holds(Key(k))).count();
        if holders != 1 {
            return Err(format!("key {k} has {holders} main copies after quiescence"));
        }
    }
    Ok(())
}

/// After quiescence: no request, waiting operation, incoming key or forwarding pointer left.
pub fn nothing_left(nodes: &[Node]) -> Result<(), String> {
    for n in nodes {
        let left = [
            ("pending requests", n.pending_requests()),
            ("waiting operations", n.waiting_ops()),
            ("incoming keys", n.keys_incoming()),
            ("forwarding pointers", n.forwarding_pointers()),
        ];
        if let Some((what, count)) = left.iter().find(|(_, c)| *c > 0) {
            return Err(format!("node {} still has {count} {what} after quiescence", n.id()));
        }
    }
    Ok(())
}

/// The value of `key` from the node holding its main copy.
pub fn value_of(nodes: &[Node], key: Key) -> Option<Vec<f32>> {
    let len = nodes.first()?.config().layout.len_of(key)?;
    nodes.iter().find_map(|n| {
        let mut v = vec![0.0; len];
        n.store().read(key, &mut v).then_some(v)
    })
}

//! Cluster-wide invariants, checked from the outside through the nodes' getters. Kept apart
//! from the code under test on purpose.

use parma_core::placement::Homes;
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
///
/// Linear in the keys, not keys × nodes: a key's main copy is at its home unless the key
/// moved, and a moved main copy is in its holder's table, which `Store::for_each_owned` walks.
/// So each key's home is asked whether it holds the key, and every node's main copies of keys
/// homed elsewhere are counted.
pub fn exactly_one_copy(nodes: &[Node], keys: u64) -> Result<(), String> {
    let Some(first) = nodes.first() else {
        return if keys == 0 { Ok(()) } else { Err("key 0 has 0 main copies: there is no node".into()) };
    };
    let cfg = first.config();
    let homes = Homes::new(cfg.placement, cfg.nodes, cfg.layout.key_end());
    let mut away = vec![0u32; usize::try_from(keys).map_err(|_| "too many keys to check")?];
    for n in nodes {
        n.store().for_each_owned(|k, _, _, _| {
            if let Some(c) = away.get_mut(k.0 as usize).filter(|_| homes.home(k) != n.id()) {
                *c += 1;
            }
        });
    }
    for (k, moved) in away.iter().enumerate() {
        let key = Key(k as u64);
        let at_home = nodes.get(homes.home(key).index()).is_some_and(|n| n.store().holds(key));
        let holders = moved + u32::from(at_home);
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

/// Every replica equals its key's main copy and has no unsent delta (after quiescence and the
/// rounds that follow it).
pub fn replicas_converged(nodes: &[Node]) -> Result<(), String> {
    replicas_converged_on(&nodes.iter().collect::<Vec<_>>())
}

/// [`replicas_converged`] over some of the nodes (those still running).
pub fn replicas_converged_on(nodes: &[&Node]) -> Result<(), String> {
    for n in nodes {
        // Collect first: reading other stores (this one included) inside the walk would take a
        // shard latch this thread already holds.
        let mut replicas = Vec::new();
        n.store().for_each_replica(|k, _, value, delta| replicas.push((k, value.to_vec(), delta.to_vec())));
        for (k, value, delta) in replicas {
            if delta.iter().any(|d| *d != 0.0) {
                return Err(format!(
                    "node {}: replica of key {k} still has an unsent delta {delta:?}",
                    n.id()
                ));
            }
            let main = nodes.iter().find_map(|m| {
                let mut v = Vec::new();
                m.store().read_owned_append(k, &mut v).then_some(v)
            });
            if main.as_deref() != Some(&value[..]) {
                return Err(format!("node {}: replica of key {k} is {value:?}, main copy {main:?}", n.id()));
            }
        }
    }
    Ok(())
}

/// No node holds a replica (once every intent has ended and a round has passed).
pub fn no_replicas(nodes: &[Node]) -> Result<(), String> {
    no_replicas_on(&nodes.iter().collect::<Vec<_>>())
}

/// [`no_replicas`] over some of the nodes (those still running).
pub fn no_replicas_on(nodes: &[&Node]) -> Result<(), String> {
    for n in nodes {
        if n.store().replicas_held() > 0 {
            return Err(format!(
                "node {} holds {} replicas after every intent ended",
                n.id(),
                n.store().replicas_held()
            ));
        }
    }
    Ok(())
}

/// The value of `key` from the node holding its main copy.
pub fn value_of(nodes: &[Node], key: Key) -> Option<Vec<f32>> {
    let len = nodes.first()?.config().layout.len_of(key)?;
    nodes.iter().find_map(|n| {
        let mut v = Vec::with_capacity(len);
        n.store().read_owned_append(key, &mut v).then_some(v)
    })
}

/// A line per node of what is outstanding there, for failure messages.
pub fn summary(nodes: &[Node]) -> String {
    let mut out = String::new();
    for n in nodes {
        let (intents, intent_keys) = n.intents_kept();
        out.push_str(&format!(
            "\n  node {}: pending {}, waiting {}, incoming {}, pointers {}, rounds {}, replicas {}, \
             intents {intents} ({intent_keys} keys), idle {}, round waits for {:?}, rejected {}, dropped {}, installs failed {}",
            n.id(),
            n.pending_requests(),
            n.waiting_ops(),
            n.keys_incoming(),
            n.forwarding_pointers(),
            n.sync_rounds_done(),
            n.store().replicas_held(),
            n.is_idle(),
            n.sync_outstanding(),
            n.stats().messages_rejected,
            n.stats().frames_rejected,
            n.stats().installs_failed,
        ));
        out.push_str(&format!(" sent by kind {:?}", &n.stats().messages_sent[..14]));
    }
    out
}

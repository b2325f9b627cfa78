//! Memory a node keeps per key beyond the key's value, measured with a counting allocator.
//!
//! Every row builds one store or node with about 1,000,000 keys of 8 `f32` (32 bytes of value
//! each), counts the bytes allocated and still live, subtracts the value bytes the keys hold
//! and divides by the keys. The store's own breakdown ([`Store::footprint`]) is printed beside
//! it and checked against the allocator.
//!
//! `cargo bench -p parma-core --bench memory` (the table in `docs/performance.md`).

#[path = "support/counting.rs"]
mod counting;

use counting::{live, peak, reset_peak};
use parma_core::placement::Homes;
use parma_core::store::{Footprint, Standalone};
use parma_core::{
    Clock, Config, Epoch, Instant, IntentKind, Key, Layout, Node, NodeId, Placement, Store, Version, WorkerId,
};

/// Floats per value.
const LEN: usize = 8;
/// Keys in the layout: two nodes, so about 1,000,000 are homed on each.
const KEY_SPACE: u64 = 2_000_000;

fn config(p: Placement) -> Config {
    config_for(KEY_SPACE, p)
}

fn config_for(space: u64, p: Placement) -> Config {
    let mut c = Config::new(2, 1, Layout::uniform(space, LEN as u32).unwrap());
    c.placement = p;
    c
}

/// The keys homed on `node`.
fn homed(node: u16, p: Placement) -> Vec<Key> {
    homed_in(KEY_SPACE, node, p)
}

fn homed_in(space: u64, node: u16, p: Placement) -> Vec<Key> {
    let homes = Homes::new(p, 2, space);
    (0..space).map(Key).filter(|k| homes.home(*k) == NodeId(node)).collect()
}

/// One row: `bytes` live for `keys` keys, of which `value_keys` hold a value (`LEN` floats).
struct Row {
    what: &'static str,
    placement: Placement,
    keys: usize,
    bytes: usize,
    value_keys: usize,
    footprint: Option<Footprint>,
    /// The most bytes live at once while the row was built, if it differs from `bytes`.
    peak: Option<usize>,
}

impl Row {
    fn print(&self) {
        let values = self.value_keys * LEN * 4;
        let per_key = (self.bytes as f64 - values as f64) / self.keys as f64;
        let n = self.keys as f64;
        let parts = match self.footprint {
            Some(f) => format!(
                "{:>8.1} {:>8.1} {:>8.1}",
                f.slots as f64 / n,
                (f.arenas as f64 - values as f64) / n,
                f.free_lists as f64 / n
            ),
            None => format!("{:>8} {:>8} {:>8}", "-", "-", "-"),
        };
        let peak = match self.peak {
            Some(b) => format!("{:>8.1}", (b as f64 - values as f64) / n),
            None => format!("{:>8}", "-"),
        };
        println!(
            "{:<40} {:<7} {:>9} {:>12.1} {parts} {peak}",
            self.what,
            self.placement.name(),
            self.keys,
            per_key
        );
        if let Some(f) = self.footprint {
            // The breakdown accounts for everything but the shard array and the layout.
            let counted = f.slots + f.arenas + f.free_lists;
            assert!(counted <= self.bytes && self.bytes - counted < 64 << 10, "{counted} vs {}", self.bytes);
        }
    }
}

/// Keys homed here, each touched once (created with its initial value), in a key space of
/// `space` keys: all of them, or (`every` > 1) one in `every`, as a model that touches its
/// range sparsely. The peak counts the bytes live at once while the keys were touched.
fn home_keys(what: &'static str, space: u64, every: usize, p: Placement) -> Row {
    let keys: Vec<Key> = homed_in(space, 0, p).into_iter().step_by(every).collect();
    let mut buf = [0f32; LEN];
    let before = live();
    reset_peak();
    let store = Store::new(&config_for(space, p), NodeId(0));
    for &k in &keys {
        assert!(store.read(k, &mut buf));
    }
    let bytes = live() - before;
    let top = peak() - before;
    Row {
        what,
        placement: p,
        keys: keys.len(),
        bytes,
        value_keys: keys.len(),
        footprint: Some(store.footprint()),
        peak: (top > bytes).then_some(top),
    }
}

/// Keys homed on the other node that moved here.
fn moved_in(p: Placement) -> Row {
    let keys = homed(1, p);
    let values = [0.5f32; LEN];
    let before = live();
    let store = Standalone::new(&config(p), NodeId(0));
    for &k in &keys {
        store.install(k, Epoch(1), Version(3), &values).unwrap();
    }
    let bytes = live() - before;
    Row {
        placement: p,
        what: "owned, moved in",
        keys: keys.len(),
        bytes,
        value_keys: keys.len(),
        footprint: Some(store.footprint()),
        peak: None,
    }
}

/// The home node's record of keys that moved away: every key homed here was created, then
/// handed to the other node. The arenas keep the freed ranges for the keys that come next.
fn directory(p: Placement) -> (Row, Row) {
    let keys = homed(1, p);
    let mut buf = [0f32; LEN];
    let mut out = Vec::with_capacity(LEN);
    let before = live();
    let store = Standalone::new(&config(p), NodeId(1));
    for &k in &keys {
        assert!(store.read(k, &mut buf));
    }
    for &k in &keys {
        out.clear();
        store.take(k, NodeId(0), &mut out).unwrap();
    }
    let bytes = live() - before;
    let f = store.footprint();
    let all = Row {
        placement: p,
        what: "away (home's record), arenas kept",
        keys: keys.len(),
        bytes,
        value_keys: 0,
        footprint: Some(f),
        peak: None,
    };
    let records = Row {
        placement: p,
        what: "away (home's record), without arenas",
        keys: keys.len(),
        bytes: bytes - f.arenas,
        value_keys: 0,
        footprint: None,
        peak: None,
    };
    (all, records)
}

/// Replicas of keys homed on the other node: a replica keeps its value and the unsent delta.
fn replicas(p: Placement) -> Row {
    let keys = homed(1, p);
    let values = [0.5f32; LEN];
    let mut cfg = config(p);
    cfg.replicas_max = keys.len();
    let before = live();
    let store = Standalone::new(&cfg, NodeId(0));
    for &k in &keys {
        store.install_replica(k, NodeId(1), Version(3), &values).unwrap();
    }
    let bytes = live() - before;
    Row {
        placement: p,
        what: "replica (value and delta)",
        keys: keys.len(),
        bytes,
        value_keys: keys.len(),
        footprint: Some(store.footprint()),
        peak: None,
    }
}

/// A node's state for keys with an acted, unexpired intent: every key homed here is in one of
/// 1,000 intents, all acted on in one round. Keys untouched by workers, so the store is empty.
fn intents(p: Placement) -> Row {
    let keys = homed(0, p);
    let mut node = Node::new(config(p), NodeId(0)).unwrap();
    let before = live();
    for chunk in keys.chunks(keys.len().div_ceil(1000)) {
        node.intent(Instant(0), WorkerId(0), chunk, Clock(1), Clock(1000), IntentKind::ReadWrite).unwrap();
    }
    node.handle_timeout(Instant(1));
    while node.poll_transmit().is_some() {}
    assert_eq!(node.intents_kept().1, keys.len());
    assert!(keys.iter().all(|k| node.has_intent(*k)));
    let bytes = live() - before;
    Row {
        placement: p,
        what: "intent state (acted intent, local key)",
        keys: keys.len(),
        bytes,
        value_keys: 0,
        footprint: None,
        peak: None,
    }
}

/// What a node allocates before it holds any key (the location cache is most of it).
fn fixed() -> usize {
    let before = live();
    let node = Node::new(config(Placement::Hashed), NodeId(0)).unwrap();
    let bytes = live() - before;
    drop(node);
    bytes
}

fn main() {
    // `cargo bench -- --test` (CI) runs the same rows; they take a few seconds.
    println!("bytes per key beyond its value ({LEN} floats = {} B), about 1,000,000 keys per row", LEN * 4);
    println!(
        "{:<40} {:<7} {:>9} {:>12} {:>8} {:>8} {:>8} {:>8}",
        "what", "place", "keys", "B/key", "slots", "arena+", "free", "peak"
    );
    for p in [Placement::Hashed, Placement::Dense] {
        home_keys("owned, homed here", KEY_SPACE, 1, p).print();
        // The same with 1.8 times the keys: the slot tables have the same number of buckets,
        // so they are fuller (hash tables double when 7/8 full).
        home_keys("owned, homed here (1.8 M keys)", KEY_SPACE * 9 / 5, 1, p).print();
        // A range 16 times wider, touched at one key in 16: too sparse for pages.
        home_keys("owned, homed here, 1 in 16 touched", KEY_SPACE * 16, 16, p).print();
        moved_in(p).print();
        let (all, records) = directory(p);
        all.print();
        records.print();
        replicas(p).print();
        intents(p).print();
    }
    let f = fixed();
    println!(
        "a node with no keys: {f} B (location cache, shards, queues), {:.2} B per key at 1,000,000 keys",
        f as f64 / 1e6
    );
}

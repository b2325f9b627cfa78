//! Key-intents per second through the nodes of a small cluster, all pumped by one thread.
//!
//! A key-intent is one key of one intent over its whole life: the worker signals it, a sync
//! round acts on it (action timing), its start reaches the key's owner, the owner decides
//! (moves the key or gives a replica), the worker's clock passes its end, and the end reaches
//! the owner. Every node of the cluster runs on the measuring thread, so the figure counts all
//! CPU work of every node involved against one core, the encoding and decoding of every frame
//! included (the "network" is a queue of encoded frames).
//!
//! Each step, the worker of every node signals one intent of `batch` random keys (from a pool
//! of `BATCHES` batches) for the clocks `[clock + AHEAD, clock + AHEAD + SPAN)` and advances
//! its clock, and the nodes' timers run with virtual time one tick later; then frames are
//! delivered until the cluster is quiet. Rounds are thus one per step, as in training where a
//! worker advances its clock about once per round.
//! Scenarios:
//!
//! - `moving`: every key-intent moves its key. The two nodes take turns on the key pool: a
//!   batch node 0 had intent for is the one node 1 signals for half a pool later, so each key
//!   is owned by the other node when an intent for it starts.
//! - `local`: each node signals intents only for keys it holds already (they moved in during
//!   the warm-up): bookkeeping only, no message.
//! - `replicated`: both nodes signal intent for the same batch in the same step; the owner keeps
//!   each key and the other node holds a replica for the intent's life, synchronized every
//!   round, and drops it at the end.
//!
//! `cargo bench -p parma-core --bench intents` prints criterion's times and then a table of
//! key-intents per second for batches of 64, 256 and 1,000 keys, with a plain-loop baseline
//! for the machine's speed (`docs/performance.md`).
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use parma_core::{
    Clock, Config, Duration, Instant, IntentKind, Key, Layout, Node, NodeId, Placement, Stats, Technique,
    WorkerId,
};

/// Floats per value.
const LEN: u32 = 8;
/// Clocks between signaling an intent and its start.
const AHEAD: u64 = 4;
/// Clocks an intent lasts.
const SPAN: u64 = 2;
/// Batches in the key pool. A batch comes back to a node (or, in `moving`, to the other node)
/// every `BATCHES / 2` steps, long after the previous intent for it ended.
const BATCHES: u64 = 64;
/// Virtual time per step.
const TICK: Duration = Duration(1000);
/// Steps of a table row's warm-up: two passes over the pool, so every key sits where the
/// scenario keeps it.
const WARMUP_STEPS: u64 = 2 * BATCHES;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    Moving,
    Local,
    Replicated,
}

impl Scenario {
    const ALL: [Scenario; 3] = [Scenario::Moving, Scenario::Local, Scenario::Replicated];

    fn name(self) -> &'static str {
        match self {
            Scenario::Moving => "moving",
            Scenario::Local => "local",
            Scenario::Replicated => "replicated",
        }
    }

    /// The batch node `node` signals intent for in step `step`.
    fn batch_of(self, node: u64, step: u64) -> u64 {
        let half = BATCHES / 2;
        match self {
            Scenario::Moving => (step + node * half) % BATCHES,
            Scenario::Local => node * half + step % half,
            Scenario::Replicated => step % BATCHES,
        }
    }
}

/// Keys `0..n`, each once, in a random order (always the same).
fn shuffled(n: u64) -> Vec<Key> {
    let mut all: Vec<Key> = (0..n).map(Key).collect();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in (1..all.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        all.swap(i, (x % (i as u64 + 1)) as usize);
    }
    all
}

/// Two nodes with one worker each, the frames between them, and the key pool.
struct Rig {
    scenario: Scenario,
    nodes: Vec<Node>,
    now: Instant,
    step: u64,
    pool: Vec<Vec<Key>>,
    /// Encoded frames in flight: (from, to, frame), in send order (so per pair FIFO).
    wire: VecDeque<(NodeId, NodeId, Vec<u8>)>,
    /// Frame buffers to reuse.
    spare: Vec<Vec<u8>>,
}

impl Rig {
    fn new(scenario: Scenario, batch: usize) -> Rig {
        let keys = BATCHES * batch as u64;
        let mut cfg = Config::new(2, 1, Layout::uniform(keys, LEN).unwrap());
        cfg.technique = Technique::Adaptive;
        // `PARMA_PLACEMENT=dense` runs every row under the dense placement.
        if let Ok(name) = std::env::var("PARMA_PLACEMENT") {
            cfg.placement = Placement::from_name(&name).expect("PARMA_PLACEMENT: hashed or dense");
        }
        let nodes = (0..2).map(|n| Node::new(cfg.clone(), NodeId(n)).unwrap()).collect();
        // Batches of random keys, as sampled from training data.
        let pool = shuffled(keys).chunks(batch).map(<[Key]>::to_vec).collect();
        Rig { scenario, nodes, now: Instant(0), step: 0, pool, wire: VecDeque::new(), spare: Vec::new() }
    }

    /// Key-intents signaled per step.
    fn per_step(&self) -> u64 {
        (self.nodes.len() * self.pool[0].len()) as u64
    }

    /// One step: intents, clocks, timers, and frames until the cluster is quiet.
    fn step(&mut self) {
        for n in 0..self.nodes.len() {
            let keys = &self.pool[self.scenario.batch_of(n as u64, self.step) as usize];
            let node = &mut self.nodes[n];
            let clock = node.clock(WorkerId(0)).0;
            let (start, end) = (Clock(clock + AHEAD), Clock(clock + AHEAD + SPAN));
            node.intent(self.now, WorkerId(0), keys, start, end, IntentKind::ReadWrite).unwrap();
            node.advance_clock(self.now, WorkerId(0)).unwrap();
        }
        self.now = self.now + TICK;
        for n in 0..self.nodes.len() {
            if self.nodes[n].poll_timeout().is_some_and(|t| t <= self.now) {
                self.nodes[n].handle_timeout(self.now);
            }
            self.drain(n);
        }
        while let Some((from, to, frame)) = self.wire.pop_front() {
            self.nodes[to.index()].handle_frame(self.now, from, &frame);
            self.spare.push(frame);
            self.drain(to.index());
        }
        self.step += 1;
    }

    /// The driver's duty after every input: encode every transmit onto the wire. Intents
    /// complete nothing, so there are no events.
    fn drain(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        while let Some(t) = node.poll_transmit() {
            let mut buf = self.spare.pop().unwrap_or_default();
            buf.resize(t.encoded_len(), 0);
            t.encode(&mut buf).unwrap();
            self.wire.push_back((node.id(), t.to(), buf));
        }
        assert!(node.poll_event().is_none(), "intents complete nothing");
    }

    fn run(&mut self, steps: u64) {
        for _ in 0..steps {
            self.step();
        }
    }

    /// `run`, under a name of its own, so that a profiler can leave the warm-up out
    /// (`valgrind --tool=callgrind --toggle-collect='*Rig::measured*'`).
    #[inline(never)]
    fn measured(&mut self, steps: u64) {
        self.run(steps);
    }

    /// Every node's counters, summed.
    fn stats(&self) -> Stats {
        let mut s = Stats::default();
        for n in &self.nodes {
            let t = n.stats();
            s.intent_keys_signaled += t.intent_keys_signaled;
            s.relocations_in += t.relocations_in;
            s.replicas_created += t.replicas_created;
            s.replicas_destroyed += t.replicas_destroyed;
            s.intent_starts += t.intent_starts;
            s.intent_ends += t.intent_ends;
            s.sync_rounds += t.sync_rounds;
            s.keys_forwarded += t.keys_forwarded;
            s.frames_rejected += t.frames_rejected;
            s.messages_rejected += t.messages_rejected;
            s.installs_failed += t.installs_failed;
            for k in 0..s.messages_sent.len() {
                s.messages_sent[k] += t.messages_sent[k];
                s.bytes_sent[k] += t.bytes_sent[k];
            }
        }
        s
    }
}

/// Time windows a table row measures, one after the other.
const WINDOWS: usize = 5;

/// What one measured run did, per key-intent.
struct Row {
    key_intents: u64,
    /// Key-intents per second in each window, ascending.
    rates: Vec<f64>,
    moves: f64,
    replicas: f64,
    messages_per_step: f64,
    bytes: f64,
}

/// Warms a new rig up, then measures `WINDOWS` windows of at least `window` each (and at least
/// one pass over the pool), and checks that each key-intent took the path its scenario
/// promises.
fn measure(scenario: Scenario, batch: usize, window: StdDuration) -> Row {
    let mut rig = Rig::new(scenario, batch);
    rig.run(WARMUP_STEPS);
    let before = rig.stats();
    let mut steps = 0;
    let mut rates = Vec::with_capacity(WINDOWS);
    for _ in 0..WINDOWS {
        let t = StdInstant::now();
        let mut n = 0;
        while n < BATCHES || t.elapsed() < window {
            rig.measured(BATCHES);
            n += BATCHES;
        }
        rates.push((n * rig.per_step()) as f64 / t.elapsed().as_secs_f64());
        steps += n;
    }
    rates.sort_by(f64::total_cmp);
    let after = rig.stats();
    let d = |f: fn(&Stats) -> u64| f(&after) - f(&before);
    let key_intents = d(|s| s.intent_keys_signaled);
    assert_eq!(key_intents, steps * rig.per_step());
    assert_eq!(d(|s| s.frames_rejected + s.messages_rejected + s.installs_failed), 0);
    let per = |x: u64| x as f64 / key_intents as f64;
    let (moves, replicas) = (per(d(|s| s.relocations_in)), per(d(|s| s.replicas_created)));
    // Every key-intent begins and ends the node's intent for its key.
    assert_eq!(d(|s| s.intent_starts), key_intents);
    match scenario {
        Scenario::Moving => assert!(moves > 0.99, "moves per key-intent: {moves}"),
        Scenario::Local => assert!(moves == 0.0 && replicas == 0.0),
        // Half the key-intents are the owner's own (local); the other half hold a replica.
        Scenario::Replicated => assert!(replicas > 0.49 && moves == 0.0, "replicas: {replicas}"),
    }
    Row {
        key_intents,
        rates,
        moves,
        replicas,
        messages_per_step: d(|s| s.messages_sent_total()) as f64 / steps as f64,
        bytes: per(d(|s| s.bytes_sent_total())),
    }
}

/// The machine's speed, for context: per key, what any intent bookkeeping does at least, one
/// insert into and one removal from a hash map, for the keys of a 256-key-batch pool.
fn baseline() -> f64 {
    let keys = shuffled(BATCHES * 256);
    let mut map: hashbrown::HashMap<Key, u32> = hashbrown::HashMap::new();
    let passes = 200;
    let t = StdInstant::now();
    for _ in 0..passes {
        for k in &keys {
            *map.entry(black_box(*k)).or_default() += 1;
        }
        for k in &keys {
            map.remove(black_box(k));
        }
    }
    black_box(&map);
    (passes * keys.len()) as f64 / t.elapsed().as_secs_f64()
}

fn bench(c: &mut Criterion) {
    const BATCH: usize = 256;
    let mut g = c.benchmark_group("key_intents");
    g.measurement_time(StdDuration::from_secs(5));
    for scenario in Scenario::ALL {
        let mut rig = Rig::new(scenario, BATCH);
        rig.run(WARMUP_STEPS);
        g.throughput(Throughput::Elements(rig.per_step()));
        g.bench_function(BenchmarkId::new(scenario.name(), BATCH), |b| {
            b.iter_custom(|iters| {
                let t = StdInstant::now();
                rig.run(iters);
                t.elapsed()
            })
        });
    }
    g.finish();
}

/// The table in `docs/performance.md`.
fn table(quick: bool) {
    let window = if quick { StdDuration::ZERO } else { StdDuration::from_millis(250) };
    println!("\nkey-intents per second on one core (2 nodes, 1 worker each, {LEN} floats per key)");
    println!("median and best of {WINDOWS} windows; per key-intent (ki): moves, replicas, bytes sent");
    println!(
        "{:<11} {:>6} {:>10} {:>10} {:>9} {:>11} {:>10} {:>9}",
        "scenario", "batch", "median", "best", "moves/ki", "replicas/ki", "msgs/step", "bytes/ki"
    );
    let base = baseline();
    for scenario in Scenario::ALL {
        for batch in [64usize, 256, 1000] {
            let r = measure(scenario, batch, window);
            println!(
                "{:<11} {:>6} {:>8.2} M {:>8.2} M {:>9.2} {:>11.2} {:>10.1} {:>9.1}",
                scenario.name(),
                batch,
                r.rates[WINDOWS / 2] / 1e6,
                r.rates[WINDOWS - 1] / 1e6,
                r.moves,
                r.replicas,
                r.messages_per_step,
                r.bytes
            );
        }
    }
    let after = baseline();
    println!(
        "plain loop (one hash map insert and one removal per key), before and after: {:.1} M/s, {:.1} M/s",
        base / 1e6,
        after / 1e6
    );
}

criterion_group!(benches, bench);

fn main() {
    // `PARMA_INTENTS_ONLY=moving` (or `moving:1000`) runs that scenario's row alone, for
    // 256-key batches (or the batch given), to profile it (e.g. under callgrind, see
    // `Rig::measured`).
    if let Ok(arg) = std::env::var("PARMA_INTENTS_ONLY") {
        let (name, batch) = arg.split_once(':').unwrap_or((arg.as_str(), "256"));
        let scenario = Scenario::ALL.into_iter().find(|s| s.name() == name).expect("unknown scenario");
        let r = measure(scenario, batch.parse().expect("batch"), StdDuration::ZERO);
        println!(
            "{name}: {} key-intents measured, {:.2} M/s (median)",
            r.key_intents,
            r.rates[WINDOWS / 2] / 1e6
        );
        return;
    }
    // `cargo bench -- --test` (CI) only checks that everything runs.
    let quick = std::env::args().any(|a| a == "--test");
    benches();
    Criterion::default().configure_from_args().final_summary();
    table(quick);
}

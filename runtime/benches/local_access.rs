//! Local access through a `Worker` against a plain sharded hash map doing the same copies.
//!
//! Both sides: 1,000 keys × 64 `f32` per operation, keys already present, a pull copies every
//! value out, a push adds a delta into every value. The baseline is what a hand-rolled
//! parameter store would be: `hashbrown` maps in `spin` latches, sharded by key. The ratio of
//! the two, measured in the same run, is the figure (`docs/performance.md`).
//!
//! `cargo bench -p parma-runtime --bench local_access`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use hashbrown::HashMap;
use parma_core::{Config, Key, Layout, NodeId, Placement};
use parma_runtime::{NodeRuntime, Worker};
use parma_transport_loopback::threaded::{cluster, ThreadedOptions};

const KEYS_PER_OP: usize = 1000;
const LEN: usize = 64;
const KEY_SPACE: u64 = 100_000;
const SHARDS: usize = 256;

/// The baseline: a sharded map of vectors behind spin latches. `L` is the value length when it
/// is fixed at compile time (the compiler then unrolls every copy and add); `RuntimeLen` takes
/// it from configuration, as a parameter server that serves more than one model must.
struct PlainMap<L: ValueLen> {
    shards: Vec<spin::Mutex<HashMap<u64, Vec<f32>>>>,
    len: L,
}

trait ValueLen: Copy + Sync {
    fn get(self) -> usize;
}

/// The length as the constant `LEN`.
#[derive(Clone, Copy)]
struct ConstLen;
impl ValueLen for ConstLen {
    #[inline(always)]
    fn get(self) -> usize {
        LEN
    }
}

/// The length as a value read at run time.
#[derive(Clone, Copy)]
struct RuntimeLen(usize);
impl ValueLen for RuntimeLen {
    #[inline(always)]
    fn get(self) -> usize {
        self.0
    }
}

impl<L: ValueLen> PlainMap<L> {
    fn new(len: L) -> PlainMap<L> {
        let shards = (0..SHARDS).map(|_| spin::Mutex::new(HashMap::new())).collect::<Vec<_>>();
        for k in 0..KEY_SPACE {
            shards[Self::shard(k)].lock().insert(k, vec![0.0; len.get()]);
        }
        PlainMap { shards, len }
    }
    #[inline]
    fn shard(k: u64) -> usize {
        (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % SHARDS
    }
    fn pull(&self, keys: &[Key], out: &mut [f32]) {
        for (k, o) in keys.iter().zip(out.chunks_exact_mut(self.len.get())) {
            let s = self.shards[Self::shard(k.0)].lock();
            if let Some(v) = s.get(&k.0) {
                o.copy_from_slice(v);
            }
        }
    }
    fn push(&self, keys: &[Key], delta: &[f32]) {
        for (k, d) in keys.iter().zip(delta.chunks_exact(self.len.get())) {
            let mut s = self.shards[Self::shard(k.0)].lock();
            if let Some(v) = s.get_mut(&k.0) {
                v.iter_mut().zip(d).for_each(|(a, b)| *a += *b);
            }
        }
    }
}

/// Each thread's keys: a fixed random batch of distinct keys.
fn batch(thread: u64) -> Vec<Key> {
    let mut x = 0x1234_5678 ^ thread.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut keys = Vec::with_capacity(KEYS_PER_OP);
    let mut seen = std::collections::HashSet::new();
    while keys.len() < KEYS_PER_OP {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let k = x % KEY_SPACE;
        if seen.insert(k) {
            keys.push(Key(k));
        }
    }
    keys
}

/// A one-node cluster (every key local) with `threads` workers, every key already created.
fn parma(threads: u16) -> (NodeRuntime, Vec<Worker>) {
    let mut cfg = Config::new(1, threads, Layout::uniform(KEY_SPACE, LEN as u32).unwrap());
    cfg.store_shards = SHARDS;
    // `PARMA_PLACEMENT=dense` measures the dense placement's page path instead.
    if let Ok(name) = std::env::var("PARMA_PLACEMENT") {
        cfg.placement = Placement::from_name(&name).expect("PARMA_PLACEMENT: hashed or dense");
    }
    let transport = cluster(1, ThreadedOptions::default()).pop().unwrap();
    let (node, mut workers) = NodeRuntime::start(cfg, NodeId(0), transport).unwrap();
    let all: Vec<Key> = (0..KEY_SPACE).map(Key).collect();
    for chunk in all.chunks(10_000) {
        let t = workers[0].push(chunk, &vec![0.0; chunk.len() * LEN]).unwrap();
        workers[0].wait(t).unwrap();
    }
    (node, workers)
}

/// Runs `op` `iters` times on each of `threads` threads at once; the elapsed wall time.
fn timed<S: Send>(states: &mut [S], iters: u64, op: impl Fn(&mut S, u64) + Sync) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for (i, st) in states.iter_mut().enumerate() {
            let op = &op;
            s.spawn(move || {
                for _ in 0..iters {
                    op(st, i as u64);
                }
            });
        }
    });
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let plain = PlainMap::new(ConstLen);
    for threads in [1u16, 2] {
        let mut g = c.benchmark_group(format!("local_{threads}_thread"));
        g.throughput(Throughput::Elements(KEYS_PER_OP as u64 * u64::from(threads)));
        g.measurement_time(Duration::from_secs(5));
        g.sample_size(60);
        let batches: Vec<Vec<Key>> = (0..u64::from(threads)).map(batch).collect();

        let mut bufs: Vec<Vec<f32>> = (0..threads).map(|_| vec![0.0; KEYS_PER_OP * LEN]).collect();
        g.bench_function(BenchmarkId::new("pull", "plain_map"), |b| {
            b.iter_custom(|iters| {
                timed(&mut bufs, iters, |buf, t| plain.pull(&batches[t as usize], black_box(buf)))
            })
        });
        let delta = vec![0.5f32; KEYS_PER_OP * LEN];
        g.bench_function(BenchmarkId::new("push", "plain_map"), |b| {
            b.iter_custom(|iters| {
                timed(&mut bufs, iters, |_, t| plain.push(&batches[t as usize], black_box(&delta)))
            })
        });

        let (node, workers) = parma(threads);
        let store = node.store().clone();
        g.bench_function(BenchmarkId::new("pull", "store_direct"), |b| {
            b.iter_custom(|iters| {
                timed(&mut bufs, iters, |buf, t| {
                    for (k, o) in batches[t as usize].iter().zip(buf.chunks_exact_mut(LEN)) {
                        store.read(*k, black_box(o));
                    }
                })
            })
        });
        g.bench_function(BenchmarkId::new("push", "store_direct"), |b| {
            b.iter_custom(|iters| {
                timed(&mut bufs, iters, |_, t| {
                    for (k, d) in batches[t as usize].iter().zip(black_box(&delta).chunks_exact(LEN)) {
                        store.add(*k, d);
                    }
                })
            })
        });
        let mut states: Vec<(Worker, Vec<f32>)> =
            workers.into_iter().map(|w| (w, vec![0.0; KEYS_PER_OP * LEN])).collect();
        g.bench_function(BenchmarkId::new("pull", "parma_worker"), |b| {
            b.iter_custom(|iters| {
                timed(&mut states, iters, |(w, buf), t| w.pull(&batches[t as usize], black_box(buf)).unwrap())
            })
        });
        g.bench_function(BenchmarkId::new("push", "parma_worker"), |b| {
            b.iter_custom(|iters| {
                timed(&mut states, iters, |(w, _), t| {
                    let ticket = w.push(&batches[t as usize], black_box(&delta)).unwrap();
                    w.wait(ticket).unwrap();
                })
            })
        });
        g.finish();
        let stats = node.stats();
        // Every access above was local: the benchmark measures the data plane only.
        let total = stats.workers_total();
        assert_eq!(
            total.keys_pulled_remote + total.keys_pushed_remote,
            0,
            "the benchmark's keys must all be local"
        );
        drop(states);
        let _ = node.shutdown();
    }
}

/// Rounds of the paired comparison, and operations per side in each round.
const ROUNDS: usize = 101;
const OPS_PER_ROUND: u64 = 200;

/// The paired comparison: in each round, the baseline and parma run `OPS_PER_ROUND` operations
/// each, back to back and in alternating order; the figure is the median of the per-round
/// ratios. Slow drifts of a shared machine's speed hit both sides of a round alike.
fn paired(quick: bool) {
    let rounds = if quick { 3 } else { ROUNDS };
    println!("\npaired comparison: median over {rounds} rounds of (parma time / plain map time)");
    println!("plain map with the value length fixed at compile time:");
    paired_against(&PlainMap::new(ConstLen), rounds);
    println!("plain map with the value length from configuration (read at run time):");
    paired_against(&PlainMap::new(RuntimeLen(black_box(LEN))), rounds);
}

fn paired_against<L: ValueLen>(plain: &PlainMap<L>, rounds: usize) {
    println!("{:<10} {:>8} {:>12} {:>12}", "operation", "threads", "median", "quartiles");
    for threads in [1u16, 2] {
        let batches: Vec<Vec<Key>> = (0..u64::from(threads)).map(batch).collect();
        let delta = vec![0.5f32; KEYS_PER_OP * LEN];
        let (node, workers) = parma(threads);
        let mut states: Vec<(Worker, Vec<f32>)> =
            workers.into_iter().map(|w| (w, vec![0.0; KEYS_PER_OP * LEN])).collect();
        let mut bufs: Vec<Vec<f32>> = (0..threads).map(|_| vec![0.0; KEYS_PER_OP * LEN]).collect();
        for op in ["pull", "push"] {
            let mut ratios = Vec::with_capacity(rounds);
            for r in 0..rounds {
                let mut base = || match op {
                    "pull" => {
                        timed(&mut bufs, OPS_PER_ROUND, |b, t| plain.pull(&batches[t as usize], black_box(b)))
                    }
                    _ => timed(&mut bufs, OPS_PER_ROUND, |_, t| {
                        plain.push(&batches[t as usize], black_box(&delta))
                    }),
                };
                let mut ours = || match op {
                    "pull" => timed(&mut states, OPS_PER_ROUND, |(w, b), t| {
                        w.pull(&batches[t as usize], black_box(b)).unwrap()
                    }),
                    _ => timed(&mut states, OPS_PER_ROUND, |(w, _), t| {
                        let ticket = w.push(&batches[t as usize], black_box(&delta)).unwrap();
                        w.wait(ticket).unwrap();
                    }),
                };
                let (b, o) = if r % 2 == 0 {
                    let b = base();
                    (b, ours())
                } else {
                    let o = ours();
                    (base(), o)
                };
                ratios.push(o.as_secs_f64() / b.as_secs_f64());
            }
            ratios.sort_by(f64::total_cmp);
            let q = |f: f64| ratios[((ratios.len() - 1) as f64 * f).round() as usize];
            println!("{op:<10} {threads:>8} {:>11.3}x {:>5.2}-{:.2}x", q(0.5), q(0.25), q(0.75));
        }
        drop(states);
        let _ = node.shutdown();
    }
}

criterion_group!(benches, bench);

fn main() {
    // `cargo bench -- --test` (CI) only checks that everything runs.
    let quick = std::env::args().any(|a| a == "--test");
    benches();
    Criterion::default().configure_from_args().final_summary();
    paired(quick);
}

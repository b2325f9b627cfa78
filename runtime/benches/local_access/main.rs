//! Local access through a `Worker` against a plain sharded hash map doing the same copies.
//!
//! Both sides: 1,000 keys × 64 `f32` per operation, keys already present, a pull copies every
//! value out, a push adds a delta into every value. The baseline is what a hand-rolled
//! parameter store would be: `hashbrown` maps in `spin` latches, sharded by key. The ratio of
//! the two, measured in the same run, is the figure (`docs/performance.md`).
//!
//! The paired table measures every kind of local key (see `setup`): keys at their home, keys
//! that moved in, and replicas, each against the same baseline on the same keys, and asserts
//! from the workers' and the node's counters that every access it timed was local.
//!
//! `cargo bench -p parma-runtime --bench local_access`; instructions per key under callgrind:
//! `probe` (`PARMA_CALLGRIND`).
#![forbid(unsafe_code)]

mod probe;
mod setup;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use hashbrown::HashMap;
use parma_core::Key;

use setup::{Kind, Setup};

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
        let mut s = Setup::start(Kind::Home, threads);
        let batches = s.batches.clone();

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

        // The store alone, outside a node (a node's store is written only through its
        // workers): the same configuration, so the same shards and home keys.
        let store = s.store_alone();
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
        g.bench_function(BenchmarkId::new("pull", "parma_worker"), |b| {
            b.iter_custom(|iters| {
                timed(&mut s.timed, iters, |(w, buf), t| {
                    w.pull(&batches[t as usize], black_box(buf)).unwrap()
                })
            })
        });
        g.bench_function(BenchmarkId::new("push", "parma_worker"), |b| {
            b.iter_custom(|iters| {
                timed(&mut s.timed, iters, |(w, _), t| {
                    let ticket = w.push(&batches[t as usize], black_box(&delta)).unwrap();
                    w.wait(ticket).unwrap();
                })
            })
        });
        g.finish();
        // Every access above was local: the benchmark measures the data plane only.
        let total = s.worker_stats();
        assert_eq!(
            total.keys_pulled_remote + total.keys_pushed_remote,
            0,
            "the benchmark's keys must all be local"
        );
        s.finish();
    }
}

/// Rounds of the paired comparison, and operations per side in each round.
const ROUNDS: usize = 101;
const OPS_PER_ROUND: u64 = 200;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Pull,
    Push,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Pull => "pull",
            Op::Push => "push",
        }
    }
}

/// The paired comparison: in each round, the baseline and parma run `OPS_PER_ROUND` operations
/// each, back to back and in alternating order; the figure is the median of the per-round
/// ratios. Slow drifts of a shared machine's speed hit both sides of a round alike.
fn paired(quick: bool) {
    let rounds = if quick { 3 } else { ROUNDS };
    println!(
        "\npaired comparison: median over {rounds} rounds of (parma time / plain map time); target <= 1.25x"
    );
    println!("baselines: const = plain map with the value length fixed at compile time,");
    println!("           config = plain map with the value length from configuration (read at run time)");
    println!("keys (timed on node 0; every timed access is checked to be local):");
    for kind in Kind::ALL {
        println!("  {:<9} {}", kind.name(), kind.describe());
    }
    println!("rounds/s: node 0's sync rounds per second while the row ran; drivers' cpu: the driver");
    println!("threads' CPU time over the row's wall time (100% = one core); us/op: median time of one");
    println!("operation, parma/plain map (context only: the ratio is the figure)");
    let by_const = PlainMap::new(ConstLen);
    let by_config = PlainMap::new(RuntimeLen(black_box(LEN)));
    println!(
        "{:<9} {:<9} {:>7} {:>8} {:>8} {:>11} {:>9} {:>12} {:>13}",
        "keys",
        "operation",
        "threads",
        "baseline",
        "median",
        "quartiles",
        "rounds/s",
        "drivers' cpu",
        "us/op (p/b)"
    );
    // `PARMA_KEYS=moved-in,replica` measures only those kinds of keys.
    let only = std::env::var("PARMA_KEYS").ok();
    let kinds =
        Kind::ALL.into_iter().filter(|k| only.as_ref().is_none_or(|o| o.split(',').any(|n| n == k.name())));
    for kind in kinds {
        for threads in [1u16, 2] {
            let mut s = Setup::start(kind, threads);
            for op in [Op::Pull, Op::Push] {
                let rows = [
                    ("const", row(&by_const, &mut s, op, rounds)),
                    ("config", row(&by_config, &mut s, op, rounds)),
                ];
                for (baseline, Row { ratios, rounds_per_sec, drivers_cpu, micros }) in rows {
                    let q = |f: f64| ratios[((ratios.len() - 1) as f64 * f).round() as usize];
                    println!(
                        "{:<9} {:<9} {threads:>7} {baseline:>8} {:>7.3}x {:>5.2}-{:.2}x {rounds_per_sec:>9.0} {:>12} {:>13}",
                        kind.name(),
                        op.name(),
                        q(0.5),
                        q(0.25),
                        q(0.75),
                        drivers_cpu.map_or("-".to_string(), |c| format!("{:.0}%", c * 100.0)),
                        format!("{:.1}/{:.1}", micros.0, micros.1)
                    );
                }
            }
            s.finish();
        }
    }
}

/// What one row of the paired table measured.
struct Row {
    /// The per-round ratios, sorted.
    ratios: Vec<f64>,
    /// Node 0's sync rounds per second while the row ran.
    rounds_per_sec: f64,
    /// The driver threads' CPU time over the row's wall time (1.0: one core busy), if known.
    drivers_cpu: Option<f64>,
    /// The median time of one operation, in µs: parma's and the baseline's (context only:
    /// absolute times drift on a shared machine; the ratio is the figure).
    micros: (f64, f64),
}

/// One row of the paired table: `rounds` rounds of `op` on the setup's keys against `plain`.
/// Asserts that every access parma's side timed was local and that no key moved meanwhile.
fn row<L: ValueLen>(plain: &PlainMap<L>, s: &mut Setup, op: Op, rounds: usize) -> Row {
    let delta = vec![0.5f32; KEYS_PER_OP * LEN];
    let mut bufs: Vec<Vec<f32>> = s.timed.iter().map(|_| vec![0.0; KEYS_PER_OP * LEN]).collect();
    let (workers_before, (node_before, sync_before)) = (s.worker_stats(), s.node_counters());
    let (start, cpu_before) = (Instant::now(), setup::drivers_cpu());
    let batches = &s.batches;
    let states = &mut s.timed;
    let (mut ratios, mut ours_secs, mut base_secs) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let mut base = || match op {
            Op::Pull => {
                timed(&mut bufs, OPS_PER_ROUND, |b, t| plain.pull(&batches[t as usize], black_box(b)))
            }
            Op::Push => {
                timed(&mut bufs, OPS_PER_ROUND, |_, t| plain.push(&batches[t as usize], black_box(&delta)))
            }
        };
        let mut ours = || match op {
            Op::Pull => {
                timed(states, OPS_PER_ROUND, |(w, b), t| w.pull(&batches[t as usize], black_box(b)).unwrap())
            }
            Op::Push => timed(states, OPS_PER_ROUND, |(w, _), t| {
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
        ours_secs.push(o.as_secs_f64());
        base_secs.push(b.as_secs_f64());
    }
    let (elapsed, cpu_after) = (start.elapsed(), setup::drivers_cpu());
    let (workers_after, (node_after, sync_after)) = (s.worker_stats(), s.node_counters());

    // Every key access parma's side timed was served from node 0's store by the worker itself
    // (the workers count each key of a call as local or as handed to the node), and node 0
    // neither sent an access away nor moved, created or dropped a key or replica meanwhile.
    let keys = rounds as u64 * OPS_PER_ROUND * s.timed.len() as u64 * KEYS_PER_OP as u64;
    let (pulled, pushed) = match op {
        Op::Pull => (keys, 0),
        Op::Push => (0, keys),
    };
    let (b, a) = (workers_before, workers_after);
    let what = format!("{} {} on {} threads", s.kind.name(), op.name(), s.timed.len());
    assert!(
        a.keys_pulled_remote == b.keys_pulled_remote
            && a.keys_pushed_remote == b.keys_pushed_remote
            && a.keys_pulled_local - b.keys_pulled_local == pulled
            && a.keys_pushed_local - b.keys_pushed_local == pushed,
        "{what}: not every timed access was local ({keys} keys timed): workers' counters before {b:?}, after {a:?}"
    );
    assert_eq!(node_before, node_after, "{what}: node 0's keys moved or accesses went remote while timed");
    s.check_state();
    let secs = elapsed.as_secs_f64();
    let per_op = |v: Vec<f64>| sorted(v)[rounds / 2] * 1e6 / OPS_PER_ROUND as f64;
    Row {
        micros: (per_op(ours_secs), per_op(base_secs)),
        ratios: sorted(ratios),
        rounds_per_sec: (sync_after - sync_before) as f64 / secs,
        drivers_cpu: cpu_before.zip(cpu_after).map(|(b, a)| a.saturating_sub(b).as_secs_f64() / secs),
    }
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

criterion_group!(benches, bench);

fn main() {
    if let Some((kind, op, len)) = probe::requested() {
        probe::run(kind, op, len);
        return;
    }
    // `cargo bench -- --test` (CI) only checks that everything runs.
    let quick = std::env::args().any(|a| a == "--test");
    benches();
    Criterion::default().configure_from_args().final_summary();
    paired(quick);
}

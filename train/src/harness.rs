//! The training harness: an in-process parma cluster of `nodes × workers` on the threaded
//! loopback transport or on ZeroMQ over 127.0.0.1 (`TrainOptions::transport`; or, for the
//! baseline, as many threads on one shared array), the training data partitioned over the
//! threads, and the epoch loop. As one node of a cluster of processes
//! (`TrainOptions::cluster`, `parma node ... train`), the process starts its own node after
//! the rendezvous and runs its workers' threads only; node 0 initializes, evaluates and
//! reports, as thread 0 does in one process.
//!
//! The harness knows nothing of the model: a [`Task`] gives the examples, the keys each one
//! touches, one step's arithmetic and the evaluation.
//!
//! Data order: the training examples are shuffled once with the seed and cut into one
//! contiguous part per thread (thread `g` = worker `g % workers` of node `g / workers`); each
//! epoch, each thread shuffles its part with a generator seeded from (seed, thread, epoch) and
//! cuts it into steps of `batch` triples. Both engines use exactly this order.
//!
//! Step `s` of a thread is its clock `s`. While it works on step `s`, the thread announces step
//! `s + ahead` ([`Params::announce`]): under parma that is an intent for the step's keys for
//! clock `[s + ahead, s + ahead + 1)` (under relocation, a `localize`) and a `prepare_sample`
//! of its negatives for the same window, so the node can make them local in time.
//!
//! Two options change how the threads meet during an epoch: `sync_every` makes a parma worker
//! wait for two sync rounds of its node every so many steps (bounded staleness of its
//! replicas), and `lockstep` puts every step between two barriers (all threads read, then all
//! push): synchronous data-parallel training, the reference for what concurrency alone costs.
//!
//! After every epoch all threads pass a barrier; thread 0 then times the epoch, and when an
//! evaluation is due reads every parameter once (remotely where needed) into a view the
//! threads share; every thread of the process that reports evaluates its share of the
//! queries, and thread 0 merges them, prints the figures and appends the epoch's record to
//! `--metrics` (`harness/epoch.rs`); all pass a second barrier. Evaluation is not part of the epoch's
//! time. A checkpoint due after the epoch
//! ([`checkpointing`]) is written by all threads after that barrier, outside the epoch's time;
//! a resumed run restores the model before its first barrier and starts at the epoch after
//! the checkpoint's, with the same data order.

mod epoch;

use std::collections::VecDeque;
use std::thread;
use std::time::Instant;

use epoch::{end_epoch, Ctx};
use parma::{Config, Key, Layout, OpError, Technique};
use parma::{NodeRuntime, Options, Worker};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use parma::Conformity;

use super::kg::Kg;
use super::kge::KgeTask;
use super::lr::data::LrData;
use super::lr::{LrOptions, LrTask};
use super::mf::{MfOptions, MfTask, Ratings};
use super::params::{HogwildParams, HogwildStore, NegSampler, Params, ParmaParams, ThreadBarrier};
use super::report::{process_cpu_secs, RunReport};
use super::task::{StepBuffers, Task};
use super::{checkpointing, mix, Engine, KgeOptions, TrainError, TrainOptions};

/// Keys per pull when reading the whole model.
const READ_CHUNK: usize = 4096;

/// One thread's steps: its part of the data, reshuffled each epoch.
struct Schedule<E> {
    part: Vec<E>,
    batch: usize,
    seed: u64,
    steps_per_epoch: u64,
    /// The order of the part for the epoch being read.
    order: Option<(u64, Vec<E>)>,
}

impl<E: Copy> Schedule<E> {
    fn new(part: Vec<E>, batch: usize, seed: u64) -> Schedule<E> {
        let steps_per_epoch = part.len().div_ceil(batch) as u64;
        Schedule { part, batch, seed, steps_per_epoch, order: None }
    }

    /// The triples of step `s` (steps are numbered across epochs).
    fn step(&mut self, s: u64) -> Vec<E> {
        let (epoch, i) = (s / self.steps_per_epoch, (s % self.steps_per_epoch) as usize);
        if self.order.as_ref().is_none_or(|(e, _)| *e != epoch) {
            let mut o = self.part.clone();
            o.shuffle(&mut StdRng::seed_from_u64(mix(self.seed ^ mix(epoch))));
            self.order = Some((epoch, o));
        }
        let o = &self.order.as_ref().expect("set above").1;
        o[i * self.batch..((i + 1) * self.batch).min(o.len())].to_vec()
    }
}

/// Reads the whole model through `p` (embeddings and accumulators, key by key).
fn read_all<P: Params>(p: &mut P, keys: u64, len: usize) -> Result<Vec<f32>, TrainError> {
    let mut all = vec![0.0f32; keys as usize * len];
    let ks: Vec<Key> = (0..keys).map(Key).collect();
    for (c, chunk) in ks.chunks(READ_CHUNK).enumerate() {
        let at = c * READ_CHUNK * len;
        p.pull(u64::MAX, chunk, &mut all[at..at + chunk.len() * len])?;
    }
    Ok(all)
}

/// One training thread: every epoch's steps, with steps announced `ahead`.
fn train_thread<T: Task, P: Params>(
    ctx: &Ctx<'_, T>,
    p: &mut P,
    g: usize,
    part: Vec<T::Example>,
) -> Result<(), TrainError> {
    let o = ctx.opts;
    let m = ctx.task;
    let len = m.value_len();

    let mut sched = Schedule::new(part, o.batch, mix(o.seed ^ mix(g as u64 + 1)));
    let spe = sched.steps_per_epoch;
    // The steps per epoch of the largest part (the first), which every thread passes in lockstep
    // (and, under a clock gate, as clocks: a thread with a smaller part advances its clock for
    // the steps it lacks, so that every thread ends an epoch at the same clock).
    let gated = o.engine == Engine::Parma && o.gate != parma::Gate::Async;
    let lockstep_spe = if o.lockstep || gated {
        m.train().len().div_ceil(o.threads()).div_ceil(o.batch) as u64
    } else {
        spe
    };
    let total = spe * u64::from(o.epochs);
    let mut queue: VecDeque<(Vec<T::Example>, Vec<Key>)> = VecDeque::new();
    let mut announced = u64::from(ctx.first_epoch - 1) * spe;
    let mut b = StepBuffers::default();
    if let Some(dir) = &o.checkpoint.resume {
        p.restore(dir)?;
    }
    p.barrier()?;
    let mut started = Instant::now();
    let mut train_secs = 0.0;
    for epoch in ctx.first_epoch..=o.epochs {
        let bar = ctx.bar.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut loss = 0.0;
        for s in (u64::from(epoch) - 1) * spe..u64::from(epoch) * spe {
            while announced < total && announced <= s + o.ahead as u64 {
                let triples = sched.step(announced);
                let mut keys = Vec::new();
                m.keys_of(&triples, &mut keys);
                let negs = m.negatives(triples.len()).map_or(0, |(_, n)| n);
                p.announce(announced, &keys, negs as u64)?;
                queue.push_back((triples, keys));
                announced += 1;
            }
            let (triples, keys) =
                queue.pop_front().ok_or(TrainError::Internal("step not announced".into()))?;
            b.vals.resize(keys.len() * len, 0.0);
            b.keys = keys;
            p.pull(s, &b.keys, &mut b.vals)?;
            let negs = m.negatives(triples.len()).map_or(0, |(_, n)| n);
            b.neg_keys.resize(negs, Key(0));
            b.neg_vals.resize(negs * len, 0.0);
            p.pull_negatives(s, &mut b.neg_keys, &mut b.neg_vals)?;
            if o.lockstep {
                p.barrier()?;
            }
            loss += m.step(&triples, &mut b);
            p.push(s, &b.touched, &b.deltas)?;
            p.advance(s)?;
            if o.lockstep {
                p.barrier()?;
            }
            if o.sync_every > 0 && (s + 1) % u64::from(o.sync_every) == 0 {
                p.sync(s)?;
            }
            bar.inc(triples.len() as u64);
        }
        // In lockstep, a thread with a smaller part passes the barriers of the steps it lacks.
        for s in spe..lockstep_spe {
            if o.lockstep {
                p.barrier()?;
                p.barrier()?;
            }
            if gated {
                p.pad(s)?;
            }
        }
        *ctx.loss.lock().unwrap_or_else(|e| e.into_inner()) += loss;
        *ctx.steps.lock().unwrap_or_else(|e| e.into_inner()) += spe;
        p.barrier()?;
        let secs = started.elapsed().as_secs_f64();
        train_secs += secs;
        end_epoch(ctx, p, g, epoch, secs, train_secs)?;
        p.barrier()?;
        if let Some(dir) = o.checkpoint.due(epoch) {
            let extra = checkpointing::extra(m.name(), m.model_name(), ctx.data, epoch);
            p.checkpoint(dir, &extra)?;
        }
        started = Instant::now();
    }
    Ok(())
}

/// Starts parma's nodes for a run: every node in this process (on `opts.transport`), or, as
/// one node of a cluster of processes (`opts.cluster`), this process's node after the
/// rendezvous. Returns the nodes, their workers (node by node) and the first node's id.
fn start_parma(opts: &TrainOptions, cfg: Config) -> Result<(Vec<NodeRuntime>, Vec<Worker>, u16), TrainError> {
    let mut ropts = Options::default();
    ropts.barrier_timeout = opts.barrier_timeout;
    let Some(net) = &opts.cluster else {
        let (nodes, workers) =
            crate::nodes::start_local(opts.transport, &cfg, &ropts).map_err(|e| match e {
                crate::nodes::StartError::Start(e) => TrainError::Start(e),
                e => TrainError::Options(format!("the {} transport: {e}", opts.transport)),
            })?;
        return Ok((nodes, workers, 0));
    };
    let launch = net.launch().map_err(TrainError::Node)?;
    if launch.role() == parma::startup::Role::Worker {
        return Err(TrainError::NotANode);
    }
    if launch.world() != opts.nodes {
        return Err(TrainError::Options(format!(
            "{} nodes asked for, but the launcher started {}",
            opts.nodes,
            launch.world()
        )));
    }
    match crate::nodes::start_node(net, &launch, cfg, ropts).map_err(TrainError::Node)? {
        Some((me, node, workers)) => {
            eprintln!(
                "node {} of {} ({}): up, training with {} worker{}",
                me.0,
                launch.world(),
                launch.launcher().name(),
                workers.len(),
                if workers.len() == 1 { "" } else { "s" }
            );
            Ok((vec![node], workers, me.0))
        }
        None => Err(TrainError::NotANode),
    }
}

/// Cuts the training data into one part per thread, after a seeded shuffle.
fn partition<E: Copy>(train: &[E], threads: usize, seed: u64) -> Vec<Vec<E>> {
    let mut all = train.to_vec();
    all.shuffle(&mut StdRng::seed_from_u64(mix(seed)));
    let per = all.len().div_ceil(threads);
    let mut parts: Vec<Vec<E>> = all.chunks(per.max(1)).map(<[E]>::to_vec).collect();
    parts.resize(threads, Vec::new());
    parts
}

/// Runs a training thread's body; a panic in it (a bug) becomes an error, so that the thread
/// stops the others as any failed thread does instead of leaving them in a barrier.
fn guarded(body: impl FnOnce() -> Result<(), TrainError>) -> Result<(), TrainError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body))
        .unwrap_or_else(|_| Err(TrainError::Thread("a training thread panicked".into())))
}

/// Whether `e` is likely a consequence of another thread's failure (a barrier or the final
/// barrier that the failed thread never reached, a wait the failure aborted).
fn consequential(e: &TrainError) -> bool {
    matches!(e, TrainError::Worker { op: "barrier" | "finalize", .. })
        || matches!(e, TrainError::Worker { error: OpError::Aborted | OpError::WorkerLeft { .. }, .. })
        || matches!(e, TrainError::Aborted)
}

/// Joins scoped training threads; returns the first error that is a cause rather than a
/// consequence (a barrier given up on because another thread failed), else the first error.
fn join_all(handles: Vec<thread::ScopedJoinHandle<'_, Result<(), TrainError>>>) -> Result<(), TrainError> {
    let mut errors = Vec::new();
    for h in handles {
        let r = h.join().unwrap_or_else(|_| Err(TrainError::Thread("a training thread panicked".into())));
        if let Err(e) = r {
            errors.push(e);
        }
    }
    match errors.iter().position(|e| !consequential(e)) {
        Some(i) => Err(errors.swap_remove(i)),
        None => errors.into_iter().next().map_or(Ok(()), Err),
    }
}

/// A worker's failure whose cause is a peer that failed (its node's transport reported it):
/// the node reports that peer, `node N failed (...); the job stops`, as `parma node` does,
/// rather than the operation the worker was in when it learned.
fn peer_cause(e: TrainError, nodes: &[NodeRuntime]) -> TrainError {
    let peer_shaped = matches!(&e, TrainError::Worker { error, .. } if error.may_come_from_a_failed_peer());
    match nodes.iter().find_map(|n| n.failed_peers().first().copied()) {
        Some(peer) if peer_shaped => TrainError::Node(crate::nodes::NodeError::PeerFailed { peer }),
        _ => e,
    }
}

/// Trains a KGE model on `kg` (called `data` in the records) and reports every epoch.
pub fn run_kge(kg: &Kg, data: &str, opts: &TrainOptions, kge: &KgeOptions) -> Result<RunReport, TrainError> {
    opts.check()?;
    kge.check(opts)?;
    let task = KgeTask::new(kg, opts, kge);
    run(&task, data, opts, kge.conformity)
}

/// Trains biased matrix factorization on `data` (called `name` in the records).
pub fn run_mf(
    data: &Ratings,
    name: &str,
    opts: &TrainOptions,
    mf: &MfOptions,
) -> Result<RunReport, TrainError> {
    opts.check()?;
    mf.check()?;
    let task = MfTask::new(data, opts, mf);
    run(&task, name, opts, Conformity::Conform)
}

/// Trains logistic regression on the hashed table `data` (called `name` in the records).
pub fn run_lr(
    data: &LrData,
    name: &str,
    opts: &TrainOptions,
    lr: &LrOptions,
) -> Result<RunReport, TrainError> {
    opts.check()?;
    lr.check()?;
    let task = LrTask::new(data, opts, lr);
    run(&task, name, opts, Conformity::Conform)
}

/// Trains `task` (its data called `data` in the records) and reports every epoch; negatives,
/// if the task has any, are drawn under `conformity`.
pub fn run<T: Task>(
    task: &T,
    data: &str,
    opts: &TrainOptions,
    conformity: Conformity,
) -> Result<RunReport, TrainError> {
    opts.check()?;
    task.check(opts.threads())?;
    let first_epoch = match &opts.checkpoint.resume {
        Some(dir) => {
            checkpointing::resumed_epoch(dir, task.name(), task.model_name(), data, opts.epochs)? + 1
        }
        None => 1,
    };
    let setup = Instant::now();
    let mut ctx = Ctx::new(task, data, opts, first_epoch);
    *ctx.bar.lock().unwrap_or_else(|e| e.into_inner()) = ctx.new_bar(first_epoch);
    let parts = partition(task.train(), opts.threads(), opts.seed);
    let keys = task.keys();
    let len = task.value_len();
    let sampler = task.negative_sampler().unwrap_or_else(|| NegSampler::uniform(1));
    let mut report = RunReport::default();
    let cpu_at = |start: Option<f64>| Some(process_cpu_secs()? - start?);
    let mut init = vec![0.0f32; len];
    match opts.engine {
        Engine::Hogwild => {
            let store = HogwildStore::new(keys, len);
            for k in 0..keys {
                task.init(opts.seed, k, &mut init);
                store.write(&[Key(k)], &init);
            }
            let barrier = ThreadBarrier::new(opts.threads(), opts.barrier_timeout);
            report.setup_secs = setup.elapsed().as_secs_f64();
            let cpu = process_cpu_secs();
            thread::scope(|s| {
                let mut handles = Vec::new();
                for (g, part) in parts.into_iter().enumerate() {
                    let (ctx, store, barrier, sampler) = (&ctx, &store, &barrier, &sampler);
                    let rng = StdRng::seed_from_u64(mix(opts.seed ^ mix(0xbad5eed ^ g as u64)));
                    let spawned =
                        thread::Builder::new().name(format!("hogwild-{g}")).spawn_scoped(s, move || {
                            let mut p = HogwildParams::new(store, barrier, rng, sampler.clone());
                            let r = guarded(|| train_thread(ctx, &mut p, g, part));
                            if r.is_err() {
                                // The others stop at their next barrier instead of waiting.
                                barrier.abort();
                            }
                            r
                        });
                    handles.push(spawned.map_err(|e| TrainError::Thread(format!("cannot spawn: {e}")))?);
                }
                join_all(handles)
            })?;
            report.cpu_secs = cpu_at(cpu);
        }
        Engine::Parma => {
            let layout =
                Layout::uniform(keys, len as u32).map_err(|e| TrainError::Options(format!("layout: {e}")))?;
            let mut cfg = Config::new(opts.nodes, opts.workers, layout);
            cfg.sync_rounds_per_sec_max = opts.sync_rounds_per_sec;
            if let Some(t) = opts.request_timeout {
                cfg.request_timeout = parma::time::Duration(u64::try_from(t.as_micros()).unwrap_or(u64::MAX));
            }
            cfg.technique = opts.technique;
            cfg.gate = opts.gate;
            cfg.seed = opts.seed;
            if opts.technique == Technique::MultiTechnique {
                let freqs = task.access_counts();
                cfg.hot_keys = std::sync::Arc::new(Config::hot_keys_from_frequencies(freqs, keys, 100.0));
            }
            // The nodes are declared before the workers, so that on an early return the
            // workers are dropped first.
            let (nodes, mut workers, first_node) = start_parma(opts, cfg)?;
            if opts.cluster.is_some() {
                report.node = Some(first_node);
            }
            let local_threads = workers.len();
            let first_thread = usize::from(first_node) * usize::from(opts.workers);
            let parts: Vec<Vec<T::Example>> =
                parts.into_iter().skip(first_thread).take(local_threads).collect();
            if parts.len() != local_threads {
                return Err(TrainError::Internal(format!(
                    "{local_threads} workers from node {first_node} on, but {} parts of the data",
                    parts.len()
                )));
            }
            ctx.local_examples = parts.iter().map(Vec::len).sum();
            ctx.first_thread = first_thread;
            ctx.evaluators = if first_node == 0 { local_threads } else { 0 };
            let mut dist = None;
            if task.negatives(1).is_some() {
                let uniform = sampler
                    .distribution()
                    .map_err(|e| TrainError::Data(format!("nothing to sample negatives from: {e:?}")))?;
                for n in 0..nodes.len() {
                    let w = &mut workers[n * usize::from(opts.workers)];
                    let fail = |error| TrainError::Worker {
                        node: first_node + n as u16,
                        worker: 0,
                        step: 0,
                        op: "register",
                        error,
                    };
                    dist = Some(w.register_distribution(uniform.clone(), conformity).map_err(fail)?);
                }
            }
            // Thread 0 writes the initial model (the others wait in their first barrier), unless
            // the threads restore it from a checkpoint.
            if opts.checkpoint.resume.is_none() && first_node == 0 {
                let w = &mut workers[0];
                let fail = |error| TrainError::Worker { node: 0, worker: 0, step: 0, op: "set", error };
                let mut vals = vec![0.0f32; READ_CHUNK * len];
                let all: Vec<Key> = (0..keys).map(Key).collect();
                for chunk in all.chunks(READ_CHUNK) {
                    for (i, k) in chunk.iter().enumerate() {
                        task.init(opts.seed, k.0, &mut vals[i * len..(i + 1) * len]);
                    }
                    let t = w.set(chunk, &vals[..chunk.len() * len]).map_err(fail)?;
                    w.wait(t).map_err(fail)?;
                }
            }
            report.setup_secs = setup.elapsed().as_secs_f64();
            let cpu = process_cpu_secs();
            let metrics_stop = std::sync::atomic::AtomicBool::new(false);
            let outcome = thread::scope(|s| {
                let mut handles = Vec::new();
                if let (Some(addr), Some(node)) =
                    (opts.cluster.as_ref().and_then(|c| c.metrics_addr.clone()), nodes.first())
                {
                    let stop = &metrics_stop;
                    s.spawn(move || crate::metrics::serve(&addr, node, stop));
                }
                for ((i, mut w), part) in workers.into_iter().enumerate().zip(parts) {
                    let g = first_thread + i;
                    let (ctx, sampler, nodes) = (&ctx, &sampler, &nodes);
                    let name = format!("parma-train-{}-{}", w.node().0, w.id().0);
                    let spawned = thread::Builder::new().name(name).spawn_scoped(s, move || {
                        let result = {
                            let rng = StdRng::seed_from_u64(mix(opts.seed ^ mix(0xfa11 ^ g as u64)));
                            let mut p = ParmaParams::new(&mut w, dist, sampler.clone(), rng);
                            let r = guarded(|| train_thread(ctx, &mut p, g, part));
                            *ctx.fallbacks.lock().unwrap_or_else(|e| e.into_inner()) += p.fallbacks;
                            r
                        };
                        if result.is_err() {
                            // The job cannot go on: every other worker of this process stops
                            // at once, its wait ended with `Aborted` (a node in another
                            // process sees this one fail when it exits).
                            nodes.iter().for_each(NodeRuntime::abort);
                            return result;
                        }
                        let (node, worker) = (w.node().0, w.id().0);
                        let fin = w.finalize().map_err(|error| TrainError::Worker {
                            node,
                            worker,
                            step: 0,
                            op: "finalize",
                            error,
                        });
                        result.and(fin)
                    });
                    handles.push(spawned.map_err(|e| TrainError::Thread(format!("cannot spawn: {e}")))?);
                }
                let joined = join_all(handles).map_err(|e| peer_cause(e, &nodes));
                metrics_stop.store(true, std::sync::atomic::Ordering::SeqCst);
                joined
            });
            report.cpu_secs = cpu_at(cpu);
            let mut shutdown = Ok(());
            for node in nodes {
                match node.shutdown() {
                    Ok(st) => {
                        let w = st.workers_total();
                        report.accesses_local += w.keys_pulled_local + w.keys_pushed_local;
                        report.accesses_remote += w.keys_pulled_remote + w.keys_pushed_remote;
                        report.bytes_sent += st.node.bytes_sent_total();
                        let c = &mut report.counters;
                        c.sync_rounds += st.node.sync_rounds;
                        c.frames_sent += st.driver.frames_sent;
                        c.frames_received += st.driver.frames_received;
                        c.commands += st.driver.commands;
                        c.driver_sleeps += st.driver.parks;
                        c.deltas_sent += st.node.deltas_sent;
                        c.keys_remote += w.keys_pulled_remote + w.keys_pushed_remote;
                        c.commands_waited += w.commands_waited;
                    }
                    Err(e) => shutdown = shutdown.and(Err(TrainError::Shutdown(e))),
                }
            }
            report.counters.steps = *ctx.steps.lock().unwrap_or_else(|e| e.into_inner());
            if opts.progress {
                eprintln!("{}", report.counters.per_step());
            }
            outcome?;
            shutdown?;
        }
    }
    report.epochs = ctx.records.into_inner().unwrap_or_else(|e| e.into_inner());
    report.eval_secs = ctx.eval_secs.into_inner().unwrap_or_else(|e| e.into_inner());
    report.checksum = ctx.checksum.into_inner().unwrap_or_else(|e| e.into_inner());
    report.negative_fallbacks = ctx.fallbacks.into_inner().unwrap_or_else(|e| e.into_inner());
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kg::Triple;

    #[test]
    fn partition_covers_the_data_once() {
        let t = |i| Triple { head: i, rel: 0, tail: i + 1 };
        let kg = Kg::from_triples(20, 1, (0..10).map(t).collect(), vec![], vec![]);
        let parts = partition(&kg.train, 3, 7);
        assert_eq!(parts.len(), 3);
        let mut all: Vec<Triple> = parts.concat();
        all.sort();
        assert_eq!(all, kg.train);
    }

    #[test]
    fn schedule_reshuffles_each_epoch_and_keeps_every_triple() {
        let part: Vec<Triple> = (0..10).map(|i| Triple { head: i, rel: 0, tail: 0 }).collect();
        let mut s = Schedule::new(part.clone(), 4, 3);
        assert_eq!(s.steps_per_epoch, 3);
        let epoch = |s: &mut Schedule<Triple>, e: u64| -> Vec<Triple> {
            (3 * e..3 * e + 3).flat_map(|i| s.step(i)).collect()
        };
        let (a, b) = (epoch(&mut s, 0), epoch(&mut s, 1));
        assert_ne!(a, b);
        for mut e in [a.clone(), b] {
            e.sort();
            assert_eq!(e, part);
        }
        assert_eq!(epoch(&mut s, 0), a);
    }
}

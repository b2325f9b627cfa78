//! Random workloads: every worker issues pulls, pushes, sets and localizes (or, under the
//! techniques with sync rounds, waits for sync rounds) of random keys, one operation at a
//! time, and checks what it reads. Under techniques with sync rounds each worker advances its
//! clock after every operation and signals intent for its operations ahead of time: early, late
//! (for the operation it is about to issue), or not at all, as its seed says.

use std::collections::{HashMap, HashSet};

use parma_core::access::PullMisses;
use parma_core::wire::WriteKind;
use parma_core::{Clock, Completion, Gate, Instant, Key, NodeId, OpError, Ticket, WorkerId};

use super::cluster::Cluster;
use crate::rng::Rng;

/// Keys with `key % SET_MOD == SET_REM` only ever get sets; all others only pushes.
const SET_MOD: u64 = 7;
const SET_REM: u64 = 3;

/// Whether `key` is one of the keys that only get sets.
pub fn is_set_key(key: Key) -> bool {
    key.0 % SET_MOD == SET_REM
}

/// Shape of a workload, all drawn from the seed.
#[derive(Clone, Debug)]
pub struct Mix {
    pub ops_per_worker: u32,
    pub keys_per_op_max: u64,
    pub p_pull: f64,
    pub p_push: f64,
    pub p_set: f64,
    /// The rest are localizes (or waits for sync rounds).
    pub think_us_max: u64,
    /// Whether the rest are waits for sync rounds instead of localizes.
    pub rounds: bool,
    /// Whether reads must see the reader's own pushes and never go backwards. Replicated keys
    /// do not promise that (a replica is a snapshot of its owner plus local updates); every
    /// read must still be a value that some prefix of the pushes can produce.
    pub strict_reads: bool,
    /// The clock gate: under any but `Async`, every worker advances its clock after every
    /// operation and waits at the gate before the next; under BSP and SSP(s) a read at clock
    /// c must hold every add issued at a clock below c − s. Under SparseSSP(s, p), every add
    /// issued below c − s − p, and, for a key the reader declared for c, every add issued
    /// below c − s that its worker had declared (see `parma_core::Gate::SparseSsp`).
    pub gate: Gate,
}

impl Mix {
    /// A mix drawn from `rng`; `localize` says whether localizes are part of it, `rounds`
    /// whether the technique runs sync rounds (then workers signal intents and the rest of the
    /// mix waits for sync rounds).
    pub fn draw(rng: &mut Rng, localize: bool, rounds: bool, strict_reads: bool) -> Mix {
        let localize = localize || rounds;
        let p_pull = 0.2 + 0.3 * rng.range(0, 100) as f64 / 100.0;
        let p_push = 0.2 + 0.3 * rng.range(0, 100) as f64 / 100.0;
        let p_set = 0.05 * rng.range(0, 2) as f64;
        let rest = (1.0 - p_pull - p_push - p_set).max(0.0);
        let (p_pull, p_push) =
            if localize { (p_pull, p_push) } else { (p_pull + rest / 2.0, p_push + rest / 2.0) };
        Mix {
            ops_per_worker: rng.range(10, 40) as u32,
            keys_per_op_max: rng.range(1, 6),
            p_pull,
            p_push,
            p_set,
            think_us_max: rng.range(0, 2_000),
            rounds,
            strict_reads,
            gate: Gate::Async,
        }
    }

    /// Whether workers advance their clocks (for intents, or for a gate).
    fn clocks(&self) -> bool {
        self.rounds || self.gate != Gate::Async
    }
}

enum Outstanding {
    /// A pull issued at worker clock `clock`.
    Pull {
        ticket: Ticket,
        keys: Vec<Key>,
        vals: Vec<f32>,
        misses: PullMisses,
        clock: u64,
        /// Under SparseSSP: its keys were declared for `clock`.
        declared: bool,
    },
    Push {
        ticket: Ticket,
        keys: Vec<Key>,
        deltas: Vec<u32>,
    },
    Other {
        ticket: Ticket,
    },
    /// A wait at the clock gate (not an operation of the mix).
    Gate {
        ticket: Ticket,
    },
}

struct SimWorker {
    node: NodeId,
    id: WorkerId,
    rng: Rng,
    /// The keys of every operation this worker will issue, drawn up front so that it can
    /// signal intent for them.
    plan: Vec<Vec<Key>>,
    /// Operations issued so far (= the worker's clock).
    issued: usize,
    /// How many operations ahead it signals intent; `None`: never.
    ahead: Option<usize>,
    /// Per operation, its node's clock for this worker when the intent for it was signaled.
    signaled_at: HashMap<usize, u64>,
    ops_left: u32,
    next_at: Instant,
    current: Option<Outstanding>,
    /// Sum of this worker's completed pushes, per key.
    own: HashMap<Key, u64>,
    /// Largest value this worker has read, per push key.
    seen: HashMap<Key, u64>,
    /// Its node stopped for good.
    stopped: bool,
    /// It told its node that it advances its clock no more.
    retired: bool,
}

/// The expected outcome, built while operations are issued.
#[derive(Default)]
pub struct Ledger {
    /// Sum of every push issued, per key.
    pub pushed: HashMap<Key, u64>,
    /// Per key, the sum of the pushes issued below each clock that saw one: (clock, sum of
    /// the pushes issued at that clock), in no order.
    pub pushed_at: HashMap<Key, HashMap<u64, u64>>,
    /// The same, of the pushes their worker had declared for their clock (under SparseSSP).
    pub declared_at: HashMap<Key, HashMap<u64, u64>>,
    /// Every value ever set, per key.
    pub set_values: HashMap<Key, HashSet<u32>>,
    next_set: u32,
    pub ops_done: u64,
}

/// The workers of a run and the ledger of what they did.
pub struct Workload {
    workers: Vec<SimWorker>,
    mix: Mix,
    pub ledger: Ledger,
    /// A node stopped for good: from then on, operations may fail with the errors a failure
    /// explains (`PeerFailed`, `Unreachable`, `Timeout`).
    failure: bool,
    /// Operations that ended with such an error.
    pub ops_failed: u64,
    /// Distributions that a share of the pulls sample from instead.
    dists: Vec<super::sampling::SampleDist>,
    /// Sample operations issued, and those of local sampling that found nothing local.
    pub samples: u64,
    pub samples_nothing_local: u64,
}

impl Workload {
    /// Workers for every node and worker slot, each with its own generator.
    pub fn new(nodes: u16, workers_per_node: u16, keys: u64, mix: Mix, rng: &mut Rng) -> Workload {
        let mut workers = Vec::new();
        for n in 0..nodes {
            for w in 0..workers_per_node {
                let mut wrng = Rng::new(rng.next_u64());
                let plan = (0..mix.ops_per_worker)
                    .map(|_| {
                        let n = wrng.range(1, mix.keys_per_op_max.min(keys));
                        let mut ks: Vec<Key> = Vec::new();
                        while (ks.len() as u64) < n {
                            let k = Key(wrng.range(0, keys - 1));
                            if !ks.contains(&k) {
                                ks.push(k);
                            }
                        }
                        ks
                    })
                    .collect();
                let ahead = match wrng.range(0, 4) {
                    0 => None,
                    1 => Some(0),
                    2 => Some(1),
                    3 => Some(3),
                    _ => Some(10),
                };
                workers.push(SimWorker {
                    node: NodeId(n),
                    id: WorkerId(w),
                    rng: wrng,
                    plan,
                    issued: 0,
                    ahead: if mix.rounds || mix.gate.speculation() > 0 { ahead } else { None },
                    signaled_at: HashMap::new(),
                    ops_left: mix.ops_per_worker,
                    next_at: Instant(rng.range(0, mix.think_us_max)),
                    current: None,
                    own: HashMap::new(),
                    seen: HashMap::new(),
                    stopped: false,
                    retired: false,
                });
            }
        }
        Workload {
            workers,
            mix,
            ledger: Ledger::default(),
            failure: false,
            ops_failed: 0,
            dists: Vec::new(),
            samples: 0,
            samples_nothing_local: 0,
        }
    }

    /// From now on, a third of the pulls sample from `dists` (one is picked per operation).
    pub fn sample_from(&mut self, dists: Vec<super::sampling::SampleDist>) {
        self.dists = dists;
    }

    /// `node` stopped for good: its workers stop (their outstanding operations are abandoned),
    /// and everyone else's operations may fail from now on.
    pub fn node_stopped(&mut self, node: NodeId) {
        self.failure = true;
        for w in self.workers.iter_mut().filter(|w| w.node == node) {
            w.ops_left = 0;
            w.current = None;
            w.stopped = true;
        }
    }

    /// Per key: the sum of the adds that completed successfully for workers whose node is
    /// still running. Those must be in the key's value at the end; any other add may or may
    /// not be.
    pub fn pushed_for_sure(&self) -> HashMap<Key, u64> {
        let mut sure: HashMap<Key, u64> = HashMap::new();
        for w in self.workers.iter().filter(|w| !w.stopped) {
            for (k, d) in &w.own {
                *sure.entry(*k).or_default() += d;
            }
        }
        sure
    }

    /// True when every worker has issued and finished all its operations.
    pub fn finished(&self) -> bool {
        self.workers.iter().all(|w| w.ops_left == 0 && w.current.is_none())
    }

    /// The workers that wait for something, with what they wait for (for failure reports).
    pub fn waiting(&self, cluster: &Cluster) -> String {
        let mut out = String::new();
        for w in &self.workers {
            let what = match &w.current {
                Some(Outstanding::Pull { ticket, clock, .. }) => {
                    format!("pull {ticket:?} issued at clock {clock}")
                }
                Some(Outstanding::Push { ticket, .. }) => format!("push {ticket:?}"),
                Some(Outstanding::Other { ticket }) => format!("other {ticket:?}"),
                Some(Outstanding::Gate { ticket }) => format!("gate {ticket:?}"),
                None => continue,
            };
            let clock = cluster.nodes()[w.node.index()].clock(w.id).0;
            out.push_str(&format!("\n  node {} worker {} at clock {clock}: {what}", w.node, w.id));
        }
        out
    }

    /// The earliest time an idle worker wants to issue its next operation.
    pub fn next_due(&self) -> Option<Instant> {
        self.workers.iter().filter(|w| w.current.is_none() && w.ops_left > 0).map(|w| w.next_at).min()
    }

    /// Collects finished operations and checks them; issues new ones that are due.
    pub fn poll(&mut self, cluster: &mut Cluster) -> Result<(), String> {
        let now = cluster.now();
        for i in 0..self.workers.len() {
            self.collect(i, cluster)?;
            if matches!(self.workers[i].current, Some(Outstanding::Gate { .. })) {
                // A gate that let the worker pass at once has its result waiting already:
                // nothing else may be due to bring the worker back here.
                self.collect(i, cluster)?;
            }
            let w = &self.workers[i];
            if w.current.is_none() && w.ops_left > 0 && w.next_at <= now {
                self.issue(i, cluster)?;
            }
            let w = &mut self.workers[i];
            if self.mix.gate != Gate::Async
                && w.ops_left == 0
                && w.current.is_none()
                && !w.retired
                && !w.stopped
            {
                w.retired = true;
                let (node, id) = (w.node, w.id);
                cluster.retire(node, id).map_err(|e| format!("node {node} worker {id}: retire: {e}"))?;
            }
        }
        Ok(())
    }

    fn collect(&mut self, i: usize, cluster: &mut Cluster) -> Result<(), String> {
        let w = &mut self.workers[i];
        let ticket = match &w.current {
            Some(
                Outstanding::Pull { ticket, .. }
                | Outstanding::Push { ticket, .. }
                | Outstanding::Other { ticket }
                | Outstanding::Gate { ticket },
            ) => *ticket,
            None => return Ok(()),
        };
        let Some(result) = cluster.take_result(w.node, w.id, ticket) else { return Ok(()) };
        let current = w.current.take();
        if let Some(Outstanding::Gate { .. }) = current {
            return match result {
                Ok(Completion::Gate) => Ok(()),
                Err(OpError::PeerFailed { .. } | OpError::Timeout) if self.failure => {
                    self.ops_failed += 1;
                    Ok(())
                }
                r => Err(format!("node {} worker {}: gate ended with {r:?}", w.node, w.id)),
            };
        }
        w.next_at = cluster.now() + parma_core::Duration(w.rng.range(0, self.mix.think_us_max));
        if self.mix.clocks() {
            let (node, id) = (w.node, w.id);
            cluster.advance_clock(node, id).map_err(|e| format!("node {node} worker {id}: clock: {e}"))?;
            if self.mix.gate != Gate::Async {
                match cluster.gate(node, id) {
                    Ok(ticket) => self.workers[i].current = Some(Outstanding::Gate { ticket }),
                    Err(OpError::PeerFailed { .. }) if self.failure => self.ops_failed += 1,
                    Err(e) => return Err(format!("node {node} worker {id}: gate refused: {e}")),
                }
            }
        }
        let w = &mut self.workers[i];
        self.ledger.ops_done += 1;
        let who = format!("node {} worker {}", w.node, w.id);
        match (current, result) {
            (
                Some(Outstanding::Pull { keys, mut vals, misses, clock, declared, .. }),
                Ok(Completion::Pull(remote)),
            ) => {
                let layout = cluster.nodes()[0].config().layout.clone();
                misses.fill(&remote, &mut vals).map_err(|e| format!("{who}: pull completion: {e}"))?;
                self.check_read(i, &keys, &vals, &layout)?;
                self.check_gate(i, &keys, &vals, &layout, clock, declared)
            }
            (Some(Outstanding::Push { keys, deltas, .. }), Ok(Completion::Write)) => {
                let w = &mut self.workers[i];
                for (k, d) in keys.iter().zip(deltas) {
                    *w.own.entry(*k).or_default() += u64::from(d);
                }
                Ok(())
            }
            (Some(Outstanding::Other { .. }), Ok(_)) => Ok(()),
            (_, Err(OpError::PeerFailed { .. } | OpError::Unreachable { .. } | OpError::Timeout))
                if self.failure =>
            {
                self.ops_failed += 1;
                Ok(())
            }
            (op, Err(e)) => {
                let what = match op {
                    Some(Outstanding::Pull { keys, .. }) => format!("pull of {keys:?}"),
                    Some(Outstanding::Push { keys, .. }) => format!("push to {keys:?}"),
                    _ => "localize, set or wait for sync rounds".into(),
                };
                Err(format!(
                    "{who}: {what} failed at {:?}: {e}; in flight {} (next {:?}, ready {:?}), stalled {}{}",
                    cluster.now(),
                    cluster.net().in_flight(),
                    cluster.net().next_delivery_time(),
                    (0..cluster.nodes().len())
                        .map(|i| cluster.net().ready(NodeId(i as u16)))
                        .collect::<Vec<_>>(),
                    cluster.stalled(),
                    super::checks::summary(cluster.nodes())
                ))
            }
            (_, Ok(c)) => Err(format!("{who}: unexpected completion {c:?}")),
        }
    }

    /// Under BSP and SSP(s): a read at clock c holds every add issued at a clock below
    /// c − s (its value, a sum of adds, is at least theirs). Not checked once a node stopped
    /// (its workers' adds may be lost with it).
    /// Under SparseSSP(s, p) the same with bound c − s − p, plus, when the reader declared the
    /// keys for c, the declared adds issued below c − s.
    fn check_gate(
        &self,
        i: usize,
        keys: &[Key],
        vals: &[f32],
        layout: &parma_core::Layout,
        clock: u64,
        declared: bool,
    ) -> Result<(), String> {
        let Some(s) = self.mix.gate.staleness() else { return Ok(()) };
        if self.failure {
            return Ok(());
        }
        let bound = clock.saturating_sub(u64::from(s));
        let all_below = bound.saturating_sub(u64::from(self.mix.gate.speculation()));
        let w = &self.workers[i];
        let sum = |book: &HashMap<Key, HashMap<u64, u64>>, k: &Key, from: u64, below: u64| -> u64 {
            book.get(k)
                .map_or(0, |by| by.iter().filter(|(c, _)| (from..below).contains(*c)).map(|(_, d)| *d).sum())
        };
        let mut at = 0;
        for k in keys {
            let x = vals[at];
            at += layout.len_of(*k).unwrap_or(0);
            if is_set_key(*k) {
                continue;
            }
            let mut due = sum(&self.ledger.pushed_at, k, 0, all_below);
            if declared {
                due += sum(&self.ledger.declared_at, k, all_below, bound);
            }
            if (x as u64) < due {
                return Err(format!(
                    "node {} worker {}: {}: key {k} read {x} at clock {clock}, below the {due} added at clocks < {all_below}{}",
                    w.node,
                    w.id,
                    self.mix.gate.name(),
                    if declared { format!(" and declared below {bound}") } else { String::new() }
                ));
            }
        }
        Ok(())
    }

    /// Whether worker `i`'s operation `j`, issued at clock `clock`, was declared for it under
    /// SparseSSP: its intent was signaled at a clock at most `clock` − p.
    fn declared(&self, i: usize, j: usize, clock: u64) -> bool {
        let p = u64::from(self.mix.gate.speculation());
        p > 0 && self.workers[i].signaled_at.get(&j).is_some_and(|at| at + p <= clock && j as u64 == clock)
    }

    fn check_read(
        &mut self,
        i: usize,
        keys: &[Key],
        vals: &[f32],
        layout: &parma_core::Layout,
    ) -> Result<(), String> {
        let w = &mut self.workers[i];
        let mut at = 0;
        for k in keys {
            let len = layout.len_of(*k).unwrap_or(0);
            let v = &vals[at..at + len];
            at += len;
            if v.iter().any(|x| *x != v[0]) {
                return Err(format!("key {k}: torn value {v:?}"));
            }
            let x = v[0];
            if is_set_key(*k) {
                let ok = x == 0.0 || self.ledger.set_values.get(k).is_some_and(|s| s.contains(&(x as u32)));
                if !ok {
                    return Err(format!("key {k}: read {x}, which was never set"));
                }
                continue;
            }
            let x = x as u64;
            let pushed = self.ledger.pushed.get(k).copied().unwrap_or(0);
            if x > pushed {
                return Err(format!("key {k}: read {x}, more than all pushes issued ({pushed})"));
            }
            if !self.mix.strict_reads {
                continue;
            }
            let own = w.own.get(k).copied().unwrap_or(0);
            if x < own {
                return Err(format!("node {} worker {}: key {k} read {x} < own pushes {own}", w.node, w.id));
            }
            let seen = w.seen.entry(*k).or_default();
            if x < *seen {
                return Err(format!(
                    "node {} worker {}: key {k} read {x} after reading {seen}",
                    w.node, w.id
                ));
            }
            *seen = x;
        }
        Ok(())
    }

    fn issue(&mut self, i: usize, cluster: &mut Cluster) -> Result<(), String> {
        let layout = cluster.nodes()[0].config().layout.clone();
        let w = &mut self.workers[i];
        w.ops_left -= 1;
        let j = w.issued;
        w.issued += 1;
        let mut keys = w.plan.get(j).cloned().unwrap_or_default();
        let roll = w.rng.range(0, 9999) as f64 / 10_000.0;
        let (node, id) = (w.node, w.id);
        let err = |e| format!("node {node} worker {id}: command refused: {e}");
        if let Some(ahead) = w.ahead {
            // The first operation also announces those before its horizon (late for some).
            let from = if j == 0 { 0 } else { j + ahead };
            let plan: Vec<(usize, Vec<Key>)> =
                (from..=j + ahead).filter_map(|m| w.plan.get(m).map(|k| (m, k.clone()))).collect();
            let now_clock = cluster.nodes()[node.index()].clock(id).0;
            for (m, ks) in plan {
                let (start, end) = (Clock(m as u64), Clock(m as u64 + 1));
                cluster.intent(node, id, &ks, start, end).map_err(err)?;
                self.workers[i].signaled_at.entry(m).or_insert(now_clock);
            }
        }
        let total = layout.total_len(&keys).map_err(|k| format!("key {k} outside layout"))?;
        let declared = self.declared(i, j, cluster.nodes()[node.index()].clock(id).0);
        if roll < self.mix.p_pull / 3.0 && !self.dists.is_empty() {
            let w = &mut self.workers[i];
            let d = self.dists[w.rng.range(0, self.dists.len() as u64 - 1) as usize].clone();
            let keys = super::sampling::draw(cluster, &d, node, id, &mut w.rng)?;
            self.samples += 1;
            self.samples_nothing_local += u64::from(keys.is_empty());
            let total = layout.total_len(&keys).map_err(|k| format!("key {k} outside layout"))?;
            let mut vals = vec![f32::NAN; total];
            let (ticket, misses) = cluster.pull(node, id, &keys, &mut vals).map_err(err)?;
            if d.level == parma_core::Conformity::NonConform && !misses.is_empty() {
                return Err(format!("node {node} worker {id}: locally sampled keys went remote"));
            }
            let clock = cluster.nodes()[node.index()].clock(id).0;
            self.workers[i].current =
                Some(Outstanding::Pull { ticket, keys, vals, misses, clock, declared: false });
        } else if roll < self.mix.p_pull {
            let mut vals = vec![f32::NAN; total];
            let (ticket, misses) = cluster.pull(node, id, &keys, &mut vals).map_err(err)?;
            let clock = cluster.nodes()[node.index()].clock(id).0;
            self.workers[i].current = Some(Outstanding::Pull { ticket, keys, vals, misses, clock, declared });
        } else if roll < self.mix.p_pull + self.mix.p_push {
            keys.retain(|k| !is_set_key(*k));
            let deltas: Vec<u32> = keys.iter().map(|_| self.workers[i].rng.range(1, 5) as u32).collect();
            let mut vals = Vec::with_capacity(total);
            let clock = cluster.nodes()[node.index()].clock(id).0;
            for (k, d) in keys.iter().zip(&deltas) {
                vals.extend(std::iter::repeat_n(*d as f32, layout.len_of(*k).unwrap_or(0)));
                *self.ledger.pushed.entry(*k).or_default() += u64::from(*d);
                if self.mix.gate != Gate::Async {
                    *self.ledger.pushed_at.entry(*k).or_default().entry(clock).or_default() += u64::from(*d);
                }
                if declared {
                    *self.ledger.declared_at.entry(*k).or_default().entry(clock).or_default() +=
                        u64::from(*d);
                }
            }
            let ticket = cluster.write(node, id, WriteKind::Add, &keys, &vals).map_err(err)?;
            self.workers[i].current = Some(Outstanding::Push { ticket, keys, deltas });
        } else if roll < self.mix.p_pull + self.mix.p_push + self.mix.p_set {
            keys.retain(|k| is_set_key(*k));
            let mut vals = Vec::new();
            for k in &keys {
                self.ledger.next_set += 1;
                let x = 1000 + self.ledger.next_set;
                self.ledger.set_values.entry(*k).or_default().insert(x);
                vals.extend(std::iter::repeat_n(x as f32, layout.len_of(*k).unwrap_or(0)));
            }
            let ticket = cluster.write(node, id, WriteKind::Set, &keys, &vals).map_err(err)?;
            self.workers[i].current = Some(Outstanding::Other { ticket });
        } else if self.mix.rounds {
            let ticket = cluster.wait_sync(node, id).map_err(err)?;
            self.workers[i].current = Some(Outstanding::Other { ticket });
        } else {
            let ticket = cluster.localize(node, id, &keys).map_err(err)?;
            self.workers[i].current = Some(Outstanding::Other { ticket });
        }
        Ok(())
    }
}

//! The simulated workers of a skewed workload and the loop that drives them with the cluster.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use parma_core::access::PullMisses;
use parma_core::wire::WriteKind;
use parma_core::{
    Announcement, Clock, Completion, Config, DistId, Distribution, Duration, Gate, Instant, Key, Layout,
    NodeId, OpError, SampleHandle, Tables, Technique, Ticket, WorkerId,
};
use parma_transport_loopback::sim::{Faults, SimNet};

use super::{Negatives, Plan, SkewOptions, SkewReport, Task};
use crate::rng::Rng;
use crate::sim::{check_step, checks, end_state, settle, Cluster};

/// Pushes and localizes one worker may have outstanding besides the `ahead` localizes; beyond,
/// it waits before its next step.
const ASYNC_SLACK: usize = 4;

/// Most simulation steps per worker step before a run counts as stuck.
const SIM_STEPS_PER_STEP_MAX: u64 = 10_000;

/// Virtual time between two samples of every node's tables (one sync round at the default
/// cap of 1,000 rounds per second).
const TABLES_EVERY_US: u64 = 1_000;

/// Where a worker is in its step.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// Starts its next step at `at`.
    Ready { at: Instant },
    /// Pulls the keys of its step as soon as its access path lets it: not before its own
    /// pushes to them completed (the ordering rule), as the runtime's worker waits.
    Issuing,
    /// Waits for the pull of its step (its local values are in `vals` already).
    Pulling { ticket: Ticket },
    /// Computes until `at`, then pushes.
    Computing { at: Instant },
    /// Waits at its clock gate since `since`.
    Gating { ticket: Ticket, since: Instant },
    /// Ran every step.
    Done,
}

struct SimWorker {
    node: NodeId,
    id: WorkerId,
    /// Index into the plan's batches.
    index: usize,
    rng: Rng,
    step: u32,
    phase: Phase,
    /// Pushes and localizes sent and not yet completed, oldest first.
    pending: VecDeque<Ticket>,
    /// Sample handles prepared for the coming steps, in step order.
    handles: VecDeque<SampleHandle>,
    /// The keys of the step in progress (the plan's, plus sampled negatives), and those that
    /// only the sampling manager drew.
    keys: Vec<Key>,
    sampled: Vec<Key>,
    /// The values of the step's pull, and the keys of it that went to the node.
    vals: Vec<f32>,
    misses: Option<PullMisses>,
    /// It told its node that it advances its clock no more.
    retired: bool,
}

/// Runs the workload of `opts` under `technique`.
pub(super) fn run(opts: &SkewOptions, technique: Technique) -> Result<SkewReport, String> {
    let workers_total = usize::from(opts.nodes) * usize::from(opts.workers);
    let keep = opts.negatives == Negatives::Plan;
    let plan = Plan::with_negatives(&opts.task, workers_total, opts.steps, opts.seed, keep);
    let cfg = config(opts, technique, &plan)?;
    let net = SimNet::new(opts.nodes, Faults::fixed_delay(opts.delay_us), opts.seed);
    let mut cluster = Cluster::new(&cfg, net).map_err(|e| format!("config: {e}"))?;
    let mut seeder = Rng::new(opts.seed ^ 0x77);
    let mut workers: Vec<SimWorker> = (0..workers_total)
        .map(|index| SimWorker {
            node: NodeId((index / usize::from(opts.workers)) as u16),
            id: WorkerId((index % usize::from(opts.workers)) as u16),
            index,
            rng: Rng::new(seeder.next_u64()),
            step: 0,
            phase: Phase::Ready { at: Instant(opts.warmup_us) },
            pending: VecDeque::new(),
            handles: VecDeque::new(),
            keys: Vec::new(),
            sampled: Vec::new(),
            vals: Vec::new(),
            misses: None,
            retired: false,
        })
        .collect();
    let sampling = register_negatives(opts, &mut cluster)?;
    let mut pushes = vec![0u32; plan.keys as usize];
    let mut checker = Checker { every: opts.check_every, since: 0, keys: plan.keys, moves: 0 };
    let mut driver = Driver {
        opts,
        announcement: cfg.announcement(),
        plan: &plan,
        pushes: &mut pushes,
        sampling,
        sampled: (0, 0),
        pushed_at: HashMap::new(),
        reads: Reads::default(),
        tables: Watermarks::new(cluster.nodes().len()),
    };
    driver.train(&mut cluster, &mut workers, &mut checker)?;
    let mut report = report(opts, technique, &cluster);
    driver.tables.sample(&cluster);
    report.tables_max = driver.tables.max_over_nodes();
    report.in_flight_max = driver.tables.in_flight_max;
    (report.sampled_accesses, report.sampled_remote) = driver.sampled;
    let r = &driver.reads;
    (report.gate_wait_us, report.read_staleness_sum, report.read_staleness_max, report.reads) =
        (r.gate_wait_us, r.staleness_sum, r.staleness_max, r.count);
    for w in &workers {
        if let Some(s) = cluster.sampler(w.node, w.id) {
            report.sampling += s.stats();
        }
    }

    settle(&mut cluster, technique, |c| checker.step(c))?;
    checks::node_invariants(cluster.nodes())?;
    end_state(&cluster, technique)?;
    check_values(&cluster, &pushes)?;
    Ok(report)
}

/// Under [`Negatives::Sampled`], registers the uniform distribution over the entities on every
/// node: its id and the negatives per step.
fn register_negatives(opts: &SkewOptions, cluster: &mut Cluster) -> Result<Option<(DistId, u64)>, String> {
    let (Negatives::Sampled(level), Task::Kge(k)) = (opts.negatives, &opts.task) else { return Ok(None) };
    if k.negatives == 0 {
        return Ok(None);
    }
    let dist = Distribution::uniform(Key(0), Key(k.entities)).map_err(|e| format!("negatives: {e}"))?;
    let id = cluster.register_distribution(&dist, level).map_err(|e| format!("register: {e}"))?;
    Ok(Some((id, u64::from(k.negatives))))
}

/// The checks during a run, every `every` simulation steps (never if 0).
struct Checker {
    every: u64,
    since: u64,
    keys: u64,
    moves: u64,
}

impl Checker {
    fn step(&mut self, cluster: &Cluster) -> Result<(), String> {
        if self.every == 0 {
            return Ok(());
        }
        self.since += 1;
        if self.since < self.every {
            return Ok(());
        }
        self.since = 0;
        check_step(cluster, self.keys, &mut self.moves)
    }
}

/// The cluster configuration: the defaults, with room for every key as a replica or a moved
/// main copy, and NuPS's hot keys from the plan's access counts.
fn config(opts: &SkewOptions, technique: Technique, plan: &Plan) -> Result<Config, String> {
    let layout = Layout::uniform(plan.keys, opts.len).map_err(|e| format!("layout: {e}"))?;
    let mut cfg = Config::new(opts.nodes, opts.workers, layout);
    cfg.technique = technique;
    cfg.gate = opts.gate;
    cfg.placement = opts.placement;
    cfg.seed = opts.seed;
    let keys = usize::try_from(plan.keys).unwrap_or(usize::MAX);
    cfg.store_keys_max = keys;
    cfg.replicas_max = keys;
    cfg.sync_rounds_per_sec_max = opts.sync_rounds_per_sec_max;
    cfg.sampling = opts.sampling;
    if technique == Technique::MultiTechnique {
        let hot = Config::hot_keys_from_frequencies(plan.frequencies(), plan.keys, 100.0);
        cfg.hot_keys = Arc::new(hot);
    }
    Ok(cfg)
}

struct Driver<'a> {
    opts: &'a SkewOptions,
    /// What announcing a step's keys does under the configuration.
    announcement: Announcement,
    plan: &'a Plan,
    /// Pushes issued, per key.
    pushes: &'a mut [u32],
    /// The distribution of sampled negatives and their number per step, if sampled.
    sampling: Option<(DistId, u64)>,
    /// Accesses to keys only the sampling manager drew in their step, and the remote ones.
    sampled: (u64, u64),
    /// Per key, the pushes issued at each clock.
    pushed_at: HashMap<Key, BTreeMap<u64, u64>>,
    reads: Reads,
    tables: Watermarks,
}

/// The high-water marks of every node's tables, sampled every [`TABLES_EVERY_US`] of virtual
/// time during the training loop and once at its end, and of the frames in flight.
struct Watermarks {
    per_node: Vec<Tables>,
    next_at: Instant,
    in_flight_max: usize,
}

impl Watermarks {
    fn new(nodes: usize) -> Watermarks {
        Watermarks { per_node: vec![Tables::default(); nodes], next_at: Instant(0), in_flight_max: 0 }
    }

    /// Samples every node if the time has come.
    fn maybe_sample(&mut self, cluster: &Cluster) {
        if cluster.now() >= self.next_at {
            self.sample(cluster);
            self.next_at = cluster.now() + Duration(TABLES_EVERY_US);
        }
    }

    fn sample(&mut self, cluster: &Cluster) {
        for (hw, n) in self.per_node.iter_mut().zip(cluster.nodes()) {
            *hw = hw.max(n.tables());
        }
        self.in_flight_max = self.in_flight_max.max(cluster.net().in_flight());
    }

    /// Each table's largest high-water mark over the nodes.
    fn max_over_nodes(&self) -> Tables {
        self.per_node.iter().fold(Tables::default(), |a, t| a.max(*t))
    }
}

/// What the steps' reads saw, and the waits at gates.
#[derive(Default)]
struct Reads {
    count: u64,
    staleness_sum: u64,
    staleness_max: u64,
    gate_wait_us: u64,
}

impl Driver<'_> {
    /// The training loop: the warm-up, then every worker's steps, until every step ran and
    /// every push and localize completed.
    fn train(
        &mut self,
        cluster: &mut Cluster,
        workers: &mut [SimWorker],
        checker: &mut Checker,
    ) -> Result<(), String> {
        for w in workers.iter_mut() {
            for step in 0..self.opts.ahead.min(self.opts.steps) {
                self.prepare(cluster, w, step)?;
            }
        }
        let steps_max = SIM_STEPS_PER_STEP_MAX.saturating_mul(u64::from(self.opts.steps) + 1);
        loop {
            for w in workers.iter_mut() {
                self.poll(cluster, w)?;
            }
            if workers.iter().all(|w| matches!(w.phase, Phase::Done) && w.pending.is_empty() && w.retired) {
                return Ok(());
            }
            if cluster.steps() > steps_max {
                return Err(format!("stuck at {:?}{}", cluster.now(), checks::summary(cluster.nodes())));
            }
            let due = workers.iter().filter_map(|w| self.due(w));
            match due.chain(cluster.next_due()).min() {
                Some(t) => cluster.run_until(t.max(cluster.now())),
                None => return Err("workers wait but nothing is due: a request was lost".into()),
            }
            checker.step(cluster)?;
            self.tables.maybe_sample(cluster);
        }
    }

    fn batch(&self, w: &SimWorker, step: u32) -> &[Key] {
        &self.plan.batches[w.index][step as usize]
    }

    /// Whether `w` has too many pushes and localizes outstanding to start a step.
    fn blocked(&self, w: &SimWorker) -> bool {
        w.pending.len() > self.opts.ahead as usize + ASYNC_SLACK
    }

    /// When `w` wants to go on by itself (not waiting for the cluster).
    fn due(&self, w: &SimWorker) -> Option<Instant> {
        match w.phase {
            Phase::Ready { at } if !self.blocked(w) => Some(at),
            Phase::Computing { at } => Some(at),
            _ => None,
        }
    }

    /// Signals intent for (or localizes) the keys of `step`.
    fn prepare(&self, cluster: &mut Cluster, w: &mut SimWorker, step: u32) -> Result<(), String> {
        if step >= self.opts.steps {
            return Ok(());
        }
        let keys = self.batch(w, step).to_vec();
        let who = format!("node {} worker {}", w.node, w.id);
        if let Some((dist, n)) = self.sampling {
            let (start, end) = (Clock(u64::from(step)), Clock(u64::from(step) + 1));
            let h = cluster
                .prepare_sample(w.node, w.id, dist, n, start, end)
                .map_err(|e| format!("{who}: prepare sample: {e}"))?;
            w.handles.push_back(h);
        }
        // What announcing a step's keys means is core's decision (`Config::announcement`):
        // an intent under the techniques with rounds and under SparseSSP, a localize under
        // relocation.
        let plan = self.announcement;
        if plan.intent() {
            let (start, end) = (Clock(u64::from(step)), Clock(u64::from(step) + 1));
            cluster.intent(w.node, w.id, &keys, start, end).map_err(|e| format!("{who}: intent: {e}"))?;
        }
        if plan.localize() {
            let t = cluster.localize(w.node, w.id, &keys).map_err(|e| format!("{who}: localize: {e}"))?;
            w.pending.push_back(t);
        }
        Ok(())
    }

    /// Collects what finished and moves the worker on as far as it can now.
    fn poll(&mut self, cluster: &mut Cluster, w: &mut SimWorker) -> Result<(), String> {
        loop {
            // Pushes and localizes may complete at once, within the call that issued them.
            self.collect_pending(cluster, w)?;
            let now = cluster.now();
            match w.phase {
                Phase::Ready { at } if at <= now && !self.blocked(w) => {
                    self.prepare(cluster, w, w.step + self.opts.ahead)?;
                    self.step_keys(cluster, w)?;
                    self.count_sampled(cluster, w);
                    w.phase = Phase::Issuing;
                }
                Phase::Issuing => {
                    let mut vals = vec![0.0; w.keys.len() * self.opts.len as usize];
                    let (ticket, misses) = match cluster.pull(w.node, w.id, &w.keys, &mut vals) {
                        Ok(issued) => issued,
                        // Held by the access path (or the node): wait for completions.
                        Err(OpError::Busy) => return Ok(()),
                        Err(e) => return Err(format!("node {} worker {}: pull: {e}", w.node, w.id)),
                    };
                    w.vals = vals;
                    w.misses = Some(misses);
                    w.phase = Phase::Pulling { ticket };
                }
                Phase::Pulling { ticket } => {
                    let Some(result) = cluster.take_result(w.node, w.id, ticket) else { return Ok(()) };
                    match (result, w.misses.take()) {
                        (Ok(Completion::Pull(remote)), Some(misses)) => {
                            misses
                                .fill(&remote, &mut w.vals)
                                .map_err(|e| format!("node {} worker {}: pull: {e}", w.node, w.id))?;
                        }
                        (other, _) => {
                            return Err(format!("node {} worker {}: pull ended {other:?}", w.node, w.id))
                        }
                    }
                    self.count_read(w);
                    let mut compute =
                        self.opts.compute_us * if w.index == 0 { self.opts.straggler } else { 1 };
                    // Drawn only when asked for, so that runs without hiccups draw what they did.
                    if self.opts.hiccups_per_mille > 0
                        && w.rng.range(0, 999) < u64::from(self.opts.hiccups_per_mille)
                    {
                        compute *= self.opts.hiccup_factor;
                    }
                    let jitter = w.rng.range(0, compute / 5);
                    let at = now + Duration(compute - compute / 10 + jitter);
                    w.phase = Phase::Computing { at };
                }
                Phase::Computing { at } if at <= now => {
                    self.push(cluster, w)?;
                    w.step += 1;
                    w.phase = if self.opts.gate != Gate::Async {
                        let ticket = cluster.gate(w.node, w.id).map_err(|e| format!("gate: {e}"))?;
                        Phase::Gating { ticket, since: now }
                    } else if w.step == self.opts.steps {
                        Phase::Done
                    } else {
                        Phase::Ready { at: now }
                    };
                }
                Phase::Gating { ticket, since } => {
                    let Some(result) = cluster.take_result(w.node, w.id, ticket) else { return Ok(()) };
                    result.map_err(|e| format!("node {} worker {}: gate: {e}", w.node, w.id))?;
                    self.reads.gate_wait_us += now.saturating_since(since).as_micros();
                    w.phase = if w.step == self.opts.steps { Phase::Done } else { Phase::Ready { at: now } };
                }
                Phase::Done if !w.retired => {
                    if self.opts.gate != Gate::Async {
                        cluster.retire(w.node, w.id).map_err(|e| format!("retire: {e}"))?;
                    }
                    w.retired = true;
                }
                _ => return Ok(()),
            }
        }
    }

    /// The keys of `w`'s step: the plan's, then the sampled negatives not among them.
    fn step_keys(&self, cluster: &mut Cluster, w: &mut SimWorker) -> Result<(), String> {
        w.keys = self.batch(w, w.step).to_vec();
        w.sampled.clear();
        let (Some((_, n)), Some(h)) = (self.sampling, w.handles.pop_front()) else { return Ok(()) };
        let who = format!("node {} worker {}", w.node, w.id);
        let mut drawn = vec![Key(0); n as usize];
        let len = drawn.len() * self.opts.len as usize;
        cluster
            .sample_keys(w.node, w.id, h, &mut drawn, len)
            .map_err(|e| format!("{who}: pull sample: {e}"))?;
        cluster.finish_sample(w.node, w.id, h).map_err(|e| format!("{who}: finish sample: {e}"))?;
        for k in crate::distinct(&drawn) {
            if !w.keys.contains(&k) {
                w.keys.push(k);
                w.sampled.push(k);
            }
        }
        Ok(())
    }

    /// Counts an access to each key of the step that only the sampling manager drew, and
    /// whether it is remote now.
    fn count_sampled(&mut self, cluster: &Cluster, w: &SimWorker) {
        let store = cluster.nodes()[w.node.index()].store();
        self.sampled.0 += w.sampled.len() as u64;
        self.sampled.1 += w.sampled.iter().filter(|k| !store.is_local(**k)).count() as u64;
    }

    /// Pushes +1 to every key of the worker's step and advances its clock.
    fn push(&mut self, cluster: &mut Cluster, w: &mut SimWorker) -> Result<(), String> {
        self.count_sampled(cluster, w);
        let keys = w.keys.clone();
        let vals = vec![1.0; keys.len() * self.opts.len as usize];
        let who = format!("node {} worker {}", w.node, w.id);
        let t = cluster
            .write(w.node, w.id, WriteKind::Add, &keys, &vals)
            .map_err(|e| format!("{who}: push: {e}"))?;
        for k in &keys {
            self.pushes[k.0 as usize] += 1;
            *self.pushed_at.entry(*k).or_default().entry(u64::from(w.step)).or_default() += 1;
        }
        w.pending.push_back(t);
        cluster.advance_clock(w.node, w.id).map_err(|e| format!("{who}: clock: {e}"))?;
        Ok(())
    }

    /// The staleness of each key of `w`'s step as it read it (see `SkewReport::reads`): every
    /// push adds 1 to every element, so a value counts the pushes it holds.
    fn count_read(&mut self, w: &SimWorker) {
        let len = self.opts.len as usize;
        let clock = u64::from(w.step);
        for (i, k) in w.keys.iter().enumerate() {
            let x = w.vals.get(i * len).copied().unwrap_or(0.0) as u64;
            // The first clock whose pushes the value cannot all hold.
            let mut held = 0;
            let mut first_missing = u64::MAX;
            for (c, n) in self.pushed_at.get(k).into_iter().flatten() {
                held += n;
                if held > x {
                    first_missing = *c;
                    break;
                }
            }
            let stale = clock.saturating_sub(first_missing);
            self.reads.count += 1;
            self.reads.staleness_sum += stale;
            self.reads.staleness_max = self.reads.staleness_max.max(stale);
        }
    }

    /// Takes the results of finished pushes and localizes; any error ends the run.
    fn collect_pending(&self, cluster: &mut Cluster, w: &mut SimWorker) -> Result<(), String> {
        let mut failed = None;
        w.pending.retain(|t| match cluster.take_result(w.node, w.id, *t) {
            None => true,
            Some(Ok(_)) => false,
            Some(Err(e)) => {
                failed.get_or_insert(e);
                false
            }
        });
        match failed {
            Some(e) => Err(format!("node {} worker {}: push or localize failed: {e}", w.node, w.id)),
            None => Ok(()),
        }
    }
}

/// The figures of the training loop, from the nodes' counters and the cluster's access counts.
fn report(opts: &SkewOptions, technique: Technique, cluster: &Cluster) -> SkewReport {
    let nodes = cluster.nodes();
    let sum = |f: &dyn Fn(&parma_core::Stats) -> u64| nodes.iter().map(|n| f(n.stats())).sum::<u64>();
    let samples = sum(&|s| s.staleness_samples);
    let accesses = cluster.accesses();
    SkewReport {
        task: opts.task.name(),
        technique,
        keys: opts.task.keys(),
        key_accesses: accesses.total(),
        remote_accesses: accesses.remote(),
        remote_pulls: accesses.pull_remote,
        bytes_sent: sum(&|s| s.bytes_sent_total()),
        messages_sent: sum(&|s| s.messages_sent_total()),
        bytes_by_kind: (0..parma_core::Stats::default().bytes_sent.len())
            .map(|k| sum(&|s| s.bytes_sent[k]))
            .collect(),
        refreshes_sent: sum(&|s| s.refreshes_sent),
        deltas_sent: sum(&|s| s.deltas_sent),
        keys_forwarded: sum(&|s| s.keys_forwarded),
        relocations: sum(&|s| s.relocations_in),
        replicas_created: sum(&|s| s.replicas_created),
        staleness_mean_us: if samples == 0 {
            0.0
        } else {
            sum(&|s| s.staleness_sum_us) as f64 / samples as f64
        },
        staleness_max_us: nodes.iter().map(|n| n.stats().staleness_max_us).max().unwrap_or(0),
        staleness_samples: samples,
        sync_rounds: sum(&|s| s.sync_rounds),
        run_time_us: cluster.now().as_micros(),
        gate_wait_us: 0,
        read_staleness_sum: 0,
        read_staleness_max: 0,
        reads: 0,
        sim_steps: cluster.steps(),
        negatives: opts.negatives,
        sampled_accesses: 0,
        sampled_remote: 0,
        sampling: Default::default(),
        tables_max: Tables::default(),
        in_flight_max: 0,
    }
}

/// Every key's main copy holds, in every element, the number of pushes to it.
///
/// Linear in the keys: every node's main copies are walked once (`Store::for_each_owned`),
/// and a key that none of the walks met, never touched, is read at its home. Runs after
/// [`crate::sim::end_state`], which checked that every key has exactly one main copy.
fn check_values(cluster: &Cluster, pushes: &[u32]) -> Result<(), String> {
    let nodes = cluster.nodes();
    let mut seen = vec![false; pushes.len()];
    let mut wrong: Option<String> = None;
    let expect = |k: usize, v: &[f32], n: u32| -> Option<String> {
        v.iter()
            .any(|x| *x != n as f32)
            .then(|| format!("key {k} ends as {:?}…, expected {n} pushes", &v[..v.len().min(4)]))
    };
    for node in nodes {
        node.store().for_each_owned(|key, _, _, v| {
            let k = key.0 as usize;
            if let (Some(n), Some(s)) = (pushes.get(k), seen.get_mut(k)) {
                *s = true;
                if wrong.is_none() {
                    wrong = expect(k, v, *n);
                }
            }
        });
    }
    if let Some(e) = wrong {
        return Err(e);
    }
    let Some(first) = nodes.first() else { return Ok(()) };
    let cfg = first.config();
    let homes = parma_core::placement::Homes::new(cfg.placement, cfg.nodes, cfg.layout.key_end());
    for (k, n) in pushes.iter().enumerate().filter(|(k, _)| !seen[*k]) {
        let key = Key(k as u64);
        let home = nodes.get(homes.home(key).index()).map(std::slice::from_ref).unwrap_or_default();
        let v = checks::value_of(home, key).ok_or_else(|| format!("key {k} has no value"))?;
        if let Some(e) = expect(k, &v, *n) {
            return Err(e);
        }
    }
    Ok(())
}

//! The clusters the benchmark measures in, set up through the public API, and the checks that
//! the keys a worker times really are where the row says.
//!
//! - [`Kind::Home`]: a one-node cluster; every key is at its home (under the dense placement,
//!   in a page of the store), created beforehand.
//! - [`Kind::MovedIn`]: two nodes under [`Technique::Relocation`]; node 0 `localize`s every key
//!   homed at node 1, so the measured keys are main copies that moved in (slots in the store's
//!   hash tables). That technique runs no sync rounds.
//! - [`Kind::Replica`]: two nodes under [`Technique::Adaptive`] (the default). A worker of
//!   node 1 signals intent for the measured keys (homed at node 1), and acts on it; then node
//!   0's workers signal intent for every key homed at node 1, over a clock window no worker
//!   reaches. Node 1 keeps the measured keys (two nodes have intent) and node 0 holds replicas
//!   of them: a pull reads the replica, a push adds to it and to its unsent delta. The other
//!   keys move to node 0 (only it has intent), so node 0 holds the whole model, as under
//!   [`Kind::MovedIn`], and its replicas lie among moved-in keys in the store, as they would in
//!   a run (a store holding nothing but the measured replicas is smaller and denser than any
//!   real one). Both nodes' sync rounds keep running while the rows are timed (deltas go to
//!   node 1, refreshes come back), as in a run: back to back, parma's (and AdaPM's) default.
//! - [`Kind::ReplicaPaced`]: the same with at most [`PACED_ROUNDS_PER_SEC`] sync rounds per
//!   second. Back to back, rounds over the in-process transport run thousands of times a
//!   second, and node 1's driver thread (on another machine in a real cluster) shares the
//!   timed workers' two cores; paced, the rows show the data plane's own cost.
//!
//! Only node 0's workers are timed; every timed key is one of the row's kind.

use std::time::{Duration, Instant};

use parma_core::placement::Homes;
use parma_core::{Clock, Config, Key, Layout, NodeId, Placement, Store, Technique};
use parma_runtime::{NodeRuntime, StoreView, Worker, WorkerStats};
use parma_transport_loopback::threaded::{cluster, ThreadedOptions};

use crate::{KEYS_PER_OP, KEY_SPACE, LEN, SHARDS};

/// The longest a setup may take to reach its state before the benchmark gives up.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);

/// The sync rounds per second of [`Kind::ReplicaPaced`]: NuPS's default staleness bound of
/// 40 ms (nups-sigmod22.txt §5.6).
const PACED_ROUNDS_PER_SEC: u32 = 25;

/// The end of the intents of [`Kind::Replica`]: a clock no worker reaches (none advances).
const INTENT_END: Clock = Clock(1 << 40);

/// Where the measured keys are on the measuring node (node 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Home,
    MovedIn,
    Replica,
    ReplicaPaced,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Home, Kind::MovedIn, Kind::Replica, Kind::ReplicaPaced];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Home => "home",
            Kind::MovedIn => "moved-in",
            Kind::Replica => "replica",
            Kind::ReplicaPaced => "replica25",
        }
    }

    /// What the cluster is and what runs beside the timed workers.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Home => {
                "one node (adaptive), every key at its home; the driver runs a sync round with \
                 nothing to send every millisecond"
            }
            Kind::MovedIn => {
                "two nodes, relocation; node 0 localized every key homed at node 1 and is timed \
                 on those; no sync rounds (the technique has none), both driver threads idle"
            }
            Kind::Replica => {
                "two nodes, adaptive; node 1 owns the timed keys, node 0 holds replicas of them \
                 (intent on both nodes) and every other key homed at node 1 moved in (intent on \
                 node 0 only); both nodes' sync rounds run back to back while timing (the \
                 default), on the same cores as the timed workers"
            }
            Kind::ReplicaPaced => {
                "as replica, with sync rounds capped at 25 per second (NuPS's default staleness \
                 bound of 40 ms)"
            }
        }
    }
}

/// A running cluster with node 0's workers ready to be timed on their key batches.
pub struct Setup {
    pub kind: Kind,
    nodes: Vec<NodeRuntime>,
    /// Node 0's workers, each with its value buffer; worker `i` accesses `batches[i]`.
    pub timed: Vec<(Worker, Vec<f32>)>,
    /// The other nodes' workers: kept alive (their intents keep the replicas) and idle.
    idle: Vec<Worker>,
    pub batches: Vec<Vec<Key>>,
}

/// The configuration of every setup: `nodes` nodes, `threads` workers each, the bench's keys
/// of `len` floats, and the placement `PARMA_PLACEMENT` names (the default if unset).
fn config(nodes: u16, threads: u16, technique: Technique, len: usize) -> Config {
    let mut cfg = Config::new(nodes, threads, Layout::uniform(KEY_SPACE, len as u32).unwrap());
    cfg.store_shards = SHARDS;
    cfg.technique = technique;
    // `PARMA_PLACEMENT=hashed` measures the hashed placement instead of the dense default.
    if let Ok(name) = std::env::var("PARMA_PLACEMENT") {
        cfg.placement = Placement::from_name(&name).expect("PARMA_PLACEMENT: hashed or dense");
    }
    cfg
}

/// Thread `thread`'s keys: a fixed random batch of `KEYS_PER_OP` distinct keys that `keep`.
fn batch(thread: u64, keep: impl Fn(Key) -> bool) -> Vec<Key> {
    let mut x = 0x1234_5678 ^ thread.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut keys = Vec::with_capacity(KEYS_PER_OP);
    let mut seen = std::collections::HashSet::new();
    while keys.len() < KEYS_PER_OP {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let k = Key(x % KEY_SPACE);
        if keep(k) && seen.insert(k) {
            keys.push(k);
        }
    }
    keys
}

/// Polls `done` until it holds, panicking with `what` and the last progress it reported after
/// [`SETUP_TIMEOUT`].
fn wait_until(what: &str, mut done: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + SETUP_TIMEOUT;
    loop {
        match done() {
            Ok(()) => return,
            Err(progress) if Instant::now() > deadline => {
                panic!("setup failed: {what} not reached after {SETUP_TIMEOUT:?}: {progress}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// How many of `keys` fail `ok`, as an error for [`wait_until`].
fn count_missing(keys: &[Vec<Key>], what: &str, ok: impl Fn(Key) -> bool) -> Result<(), String> {
    let all = keys.iter().map(Vec::len).sum::<usize>();
    let missing = keys.iter().flatten().filter(|k| !ok(**k)).count();
    if missing == 0 {
        Ok(())
    } else {
        Err(format!("{missing} of {all} keys are not {what}"))
    }
}

impl Setup {
    /// Starts the cluster of `kind` with `threads` workers per node and brings the measured
    /// keys into their state; panics if that does not happen within [`SETUP_TIMEOUT`].
    pub fn start(kind: Kind, threads: u16) -> Setup {
        Setup::start_len(kind, threads, LEN)
    }

    /// [`Setup::start`] with values of `len` floats instead of `LEN`.
    pub fn start_len(kind: Kind, threads: u16, len: usize) -> Setup {
        let (nodes, technique) = match kind {
            Kind::Home => (1, Technique::default()),
            Kind::MovedIn => (2, Technique::Relocation),
            Kind::Replica | Kind::ReplicaPaced => (2, Technique::Adaptive),
        };
        let mut cfg = config(nodes, threads, technique, len);
        if kind == Kind::ReplicaPaced {
            cfg.sync_rounds_per_sec_max = Some(PACED_ROUNDS_PER_SEC);
        }
        let homes = Homes::new(cfg.placement, cfg.nodes, cfg.layout.key_end());
        let mut runtimes = Vec::new();
        let mut workers: Vec<Vec<Worker>> = Vec::new();
        for (i, t) in cluster(nodes, ThreadedOptions::default()).into_iter().enumerate() {
            let (node, ws) = NodeRuntime::start(cfg.clone(), NodeId(i as u16), t).unwrap();
            runtimes.push(node);
            workers.push(ws);
        }
        let idle = workers.split_off(1).into_iter().flatten().collect();
        let mut timed = workers.pop().unwrap();
        let away = |k: Key| homes.home(k) != NodeId(0);
        let batches: Vec<Vec<Key>> = (0..u64::from(threads))
            .map(|t| if kind == Kind::Home { batch(t, |_| true) } else { batch(t, away) })
            .collect();
        let mut s = Setup { kind, nodes: runtimes, timed: Vec::new(), idle, batches };
        match kind {
            Kind::Home => {
                // Every key created beforehand.
                let all: Vec<Key> = (0..KEY_SPACE).map(Key).collect();
                for chunk in all.chunks(10_000) {
                    let t = timed[0].push(chunk, &vec![0.0; chunk.len() * len]).unwrap();
                    timed[0].wait(t).unwrap();
                }
            }
            Kind::MovedIn => {
                // Node 0 ends up with the whole model: half of it moved in.
                let theirs: Vec<Key> = (0..KEY_SPACE).map(Key).filter(|k| away(*k)).collect();
                for chunk in theirs.chunks(10_000) {
                    let t = timed[0].localize(chunk).unwrap();
                    timed[0].wait(t).unwrap();
                }
            }
            Kind::Replica | Kind::ReplicaPaced => {
                // Node 1 (the measured keys' home and owner) signals its intent first and acts
                // on it, so that node 0's intent finds two nodes with intent for them: the
                // owner keeps them and hands node 0 replicas. Every other key homed at node 1
                // has intent on node 0 alone and moves there.
                let measured: std::collections::HashSet<Key> = s.batches.iter().flatten().copied().collect();
                let mut shared: Vec<Key> = measured.iter().copied().collect();
                shared.sort_unstable();
                s.idle[0].intent(&shared, Clock(0), INTENT_END).unwrap();
                s.idle[0].wait_sync().unwrap();
                let rest: Vec<Key> =
                    (0..KEY_SPACE).map(Key).filter(|k| away(*k) && !measured.contains(k)).collect();
                timed[0].intent(&rest, Clock(0), INTENT_END).unwrap();
                for (w, keys) in timed.iter_mut().zip(&s.batches) {
                    w.intent(keys, Clock(0), INTENT_END).unwrap();
                }
                let store = s.nodes[0].inspect();
                wait_until("replicas and moved-in keys on node 0", || {
                    count_missing(&s.batches, "replicas", |k| store.has_replica(k))?;
                    count_missing(std::slice::from_ref(&rest), "moved in", |k| store.holds(k))
                });
            }
        }
        s.timed = timed.into_iter().map(|w| (w, vec![0.0; KEYS_PER_OP * len])).collect();
        s.check_state();
        s
    }

    /// Node 0's store.
    pub fn store(&self) -> StoreView {
        self.nodes[0].inspect()
    }

    /// A store of node 0's configuration outside any node, for measuring the store alone.
    pub fn store_alone(&self) -> Store {
        Store::new(self.nodes[0].config(), NodeId(0))
    }

    /// Asserts that every measured key is of the setup's kind on node 0 now.
    pub fn check_state(&self) {
        let (mine, other) = (self.store(), self.nodes.get(1).map(|n| n.inspect()));
        let kind = self.kind.name();
        let bad = |ok: &dyn Fn(Key) -> bool| self.batches.iter().flatten().copied().find(|k| !ok(*k));
        let wrong = match self.kind {
            Kind::Home => bad(&|k| mine.homes().home(k) == NodeId(0) && mine.holds(k)),
            Kind::MovedIn => bad(&|k| mine.homes().home(k) != NodeId(0) && mine.holds(k)),
            Kind::Replica | Kind::ReplicaPaced => {
                let owner = other.expect("two nodes");
                bad(&|k| mine.has_replica(k) && !mine.holds(k) && owner.holds(k))
            }
        };
        assert_eq!(wrong, None, "a measured key is not {kind} on node 0");
    }

    /// The sum of node 0's workers' counters.
    pub fn worker_stats(&self) -> WorkerStats {
        self.timed.iter().fold(WorkerStats::default(), |a, (w, _)| a.plus(w.stats()))
    }

    /// Node 0's protocol counters that must not move while keys stay where they are, and its
    /// sync rounds so far.
    pub fn node_counters(&self) -> (NodeCounters, u64) {
        let s = self.nodes[0].stats().node;
        let moves = NodeCounters {
            relocations_in: s.relocations_in,
            relocations_out: s.relocations_out,
            replicas_created: s.replicas_created,
            replicas_destroyed: s.replicas_destroyed,
            replicas_upgraded: s.replicas_upgraded,
            keys_pulled_remote: s.keys_pulled_remote,
            keys_pushed_remote: s.keys_pushed_remote,
        };
        (moves, s.sync_rounds)
    }

    /// Finalizes every worker and shuts the nodes down.
    pub fn finish(self) {
        let Setup { nodes, timed, idle, .. } = self;
        let workers = timed.into_iter().map(|(w, _)| w).chain(idle);
        std::thread::scope(|s| {
            let handles: Vec<_> = workers.map(|w| s.spawn(move || w.finalize())).collect();
            for h in handles {
                h.join().unwrap().expect("finalize");
            }
        });
        for n in nodes {
            n.shutdown().expect("a clean shutdown");
        }
    }
}

/// Counters of node 0 that a timed section must leave as they were.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeCounters {
    relocations_in: u64,
    relocations_out: u64,
    replicas_created: u64,
    replicas_destroyed: u64,
    replicas_upgraded: u64,
    keys_pulled_remote: u64,
    keys_pushed_remote: u64,
}

/// The CPU time the process's driver threads (`parma-driver-*`) have used, from Linux's
/// `/proc/self/task/*/stat` (`None` where that is not readable). The drivers run the sync
/// rounds, on the same cores as the timed workers.
pub fn drivers_cpu() -> Option<Duration> {
    // Linux reports thread times in USER_HZ ticks, 100 per second on every architecture it
    // exposes to user space through /proc.
    const TICK: Duration = Duration::from_millis(10);
    let mut ticks = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = task.ok()?.path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else { continue };
        if !comm.starts_with("parma-driver") {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else { continue };
        // The fields after the command name: state is the first, utime the 12th, stime the 13th.
        let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        ticks += rest.get(11)?.parse::<u64>().ok()? + rest.get(12)?.parse::<u64>().ok()?;
    }
    Some(TICK * u32::try_from(ticks).ok()?)
}

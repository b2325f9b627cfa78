//! Configuration of one node. Every queue and table has a bound here.

use alloc::sync::Arc;

use hashbrown::HashSet;

use crate::action_timing::TimingParams;
use crate::error::ConfigError;
use crate::ids::{ClusterId, Key, NodeId};
use crate::layout::Layout;
use crate::sampling::SamplingOptions;
use crate::time::Duration;

mod setters;

/// The most nodes a cluster may have.
pub const NODES_MAX: u16 = 4096;

/// The most shards a store may have: a key's shard is taken from 16 bits of its hash.
pub const STORE_SHARDS_MAX: usize = 1 << 16;

/// How parameters are managed. Chosen per run; all nodes of a cluster must agree.
///
/// The adaptive techniques act on intents in sync rounds; the others ignore intents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Technique {
    /// AdaPM: driven by intent. A key with intent on exactly one node (and no replicas
    /// elsewhere) moves there; a key with intent on several nodes stays with its owner and
    /// every other node with intent gets a replica for exactly as long as its intent lasts.
    #[default]
    Adaptive,
    /// AdaPM's ablation without replication: every node with intent gets the key moved to it,
    /// in turn (hot keys travel back and forth).
    AdaptiveNoReplication,
    /// AdaPM's ablation without relocation: keys stay on their home node; every other node
    /// with intent gets a replica while its intent lasts.
    AdaptiveNoRelocation,
    /// Classic parameter server: every key stays on its home node; intents and `localize` do
    /// nothing.
    StaticPartitioning,
    /// Lapse: keys move to the node that calls `localize` for them; intents do nothing.
    Relocation,
    /// Every node holds a replica of every key of the layout for the whole run, synchronized
    /// with the key's home node in the background (sync rounds). Needs a dense layout whose
    /// keys fit `replicas_max`.
    FullReplication,
    /// NuPS with a static choice: the keys in `Config::hot_keys` are replicated on every node
    /// for the whole run; every other key moves to the node with intent (as
    /// [`Technique::AdaptiveNoReplication`]).
    MultiTechnique,
}

impl Technique {
    /// Every technique, in the order reports list them.
    pub const ALL: [Technique; 7] = [
        Technique::Adaptive,
        Technique::AdaptiveNoReplication,
        Technique::AdaptiveNoRelocation,
        Technique::StaticPartitioning,
        Technique::Relocation,
        Technique::FullReplication,
        Technique::MultiTechnique,
    ];

    /// The technique's name on the command line and in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Technique::Adaptive => "adaptive",
            Technique::AdaptiveNoReplication => "adaptive-no-replication",
            Technique::AdaptiveNoRelocation => "adaptive-no-relocation",
            Technique::StaticPartitioning => "static",
            Technique::Relocation => "relocation",
            Technique::FullReplication => "full-replication",
            Technique::MultiTechnique => "multi-technique",
        }
    }

    /// The technique called `name` (see [`Technique::name`]).
    pub fn from_name(name: &str) -> Option<Technique> {
        Technique::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Whether nodes run sync rounds (intents, replicas, grouped synchronization).
    pub const fn uses_rounds(self) -> bool {
        !matches!(self, Technique::StaticPartitioning | Technique::Relocation)
    }

    /// Whether nodes may hold replicas of keys they do not own.
    pub const fn uses_replicas(self) -> bool {
        matches!(
            self,
            Technique::Adaptive
                | Technique::AdaptiveNoRelocation
                | Technique::FullReplication
                | Technique::MultiTechnique
        )
    }

    /// Whether some replicas live for the whole run, whatever the intents (sync rounds then
    /// never stop).
    pub const fn keeps_replicas(self) -> bool {
        matches!(self, Technique::FullReplication | Technique::MultiTechnique)
    }

    /// Whether workers' `localize` moves keys (only under [`Technique::Relocation`]).
    pub const fn uses_localize(self) -> bool {
        matches!(self, Technique::Relocation)
    }

    /// Whether a key ever leaves its home node.
    pub const fn moves_keys(self) -> bool {
        matches!(
            self,
            Technique::Adaptive
                | Technique::AdaptiveNoReplication
                | Technique::Relocation
                | Technique::MultiTechnique
        )
    }
}

/// Where keys live before anything moves (their home nodes), and how a store keeps the keys
/// homed on its node. All nodes of a cluster must agree. See [`crate::placement`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Placement {
    /// Home = a hash of the key modulo the node count; every key a store holds has a slot in a
    /// hash table. For key ranges the model touches sparsely (hashed feature ids).
    Hashed,
    /// Home = a permutation of the layout's range modulo the node count; a store keeps its
    /// home keys in pages of an array indexed by the permutation (no key stored, about 16
    /// bytes per key beyond its value). A page of 256 home keys is allocated once enough of
    /// them are touched to fill it better than a hash table would; until then, and for ranges
    /// touched sparsely, the keys have hash-table slots as under [`Placement::Hashed`]. Pays
    /// off for models that touch most keys of their range: embeddings, knowledge graphs, word
    /// vectors. The default: a sparsely touched range costs about what it costs under
    /// [`Placement::Hashed`].
    #[default]
    Dense,
}

impl Placement {
    /// The placement's name on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Placement::Hashed => "hashed",
            Placement::Dense => "dense",
        }
    }

    /// The placement called `name` (see [`Placement::name`]).
    pub fn from_name(name: &str) -> Option<Placement> {
        [Placement::Hashed, Placement::Dense].into_iter().find(|p| p.name() == name)
    }
}

/// When a worker that advanced its clock may go on ([`crate::Node::gate`]): the consistency
/// model. Chosen per run; all nodes of a cluster must agree.
///
/// A worker's clock counts its [`crate::Node::advance_clock`] calls; an update "made at clock
/// t" is one issued while the worker's clock was t. Under the gates that bound staleness, a
/// worker at clock c passes the gate only once every update that any worker made at a clock
/// below c − s is applied at its main copy and every replica on this node was refreshed after
/// that: every read it then makes (of a main copy here, of a remote key, of a replica) sees
/// those updates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Gate {
    /// No gate: workers never wait for each other (AdaPM's own mode).
    #[default]
    Async,
    /// Bulk synchronous parallel: a worker at clock c waits until every worker finished clock
    /// c − 1 and its updates are applied (SSP with staleness 0).
    Bsp,
    /// Stale synchronous parallel (Petuum/Bösen): a worker at clock c waits until every update
    /// made at clocks up to c − s − 1 is visible to it.
    Ssp {
        /// The bound s.
        staleness: u32,
    },
    /// ps-lite's bounded delay: a worker at clock c waits until its own requests issued at
    /// clocks up to c − τ − 1 completed (τ = 0 is sequential). Other workers are not waited for.
    BoundedDelay {
        /// The bound τ.
        delay: u32,
    },
    /// SparseSSP (flexps-report.txt §8): SSP(s) that lets a worker run up to `speculation`
    /// clocks further ahead while the keys it declared for its clock meet none that the
    /// workers behind it declared for theirs. A key is *declared* for clock t by a worker's
    /// intent ([`crate::Node::intent`]) covering t, signaled while the worker's clock was at
    /// most t − speculation. A read at clock c of a key the reader declared for c sees every
    /// update made at clocks ≤ c − s − 1 to it by a worker that declared it for that clock;
    /// every other read and update is bounded as under SSP(s + speculation).
    SparseSsp {
        /// The bound s.
        staleness: u32,
        /// How many clocks beyond s a worker may speculate (at least 1).
        speculation: u32,
    },
}

impl Gate {
    /// The gate's name on the command line and in reports: `async`, `bsp`, `ssp:S`,
    /// `bounded-delay:T`, `sparse-ssp:S:P`.
    pub fn name(self) -> alloc::string::String {
        match self {
            Gate::Async => "async".into(),
            Gate::Bsp => "bsp".into(),
            Gate::Ssp { staleness } => alloc::format!("ssp:{staleness}"),
            Gate::BoundedDelay { delay } => alloc::format!("bounded-delay:{delay}"),
            Gate::SparseSsp { staleness, speculation } => {
                alloc::format!("sparse-ssp:{staleness}:{speculation}")
            }
        }
    }

    /// The gate called `name` (see [`Gate::name`]); `ssp` alone is `ssp:1`, `bounded-delay`
    /// alone `bounded-delay:1`, `sparse-ssp` alone `sparse-ssp:1:1` and `sparse-ssp:S`
    /// `sparse-ssp:S:1`. A speculation of 0 is refused (that is `ssp:S`).
    pub fn from_name(name: &str) -> Option<Gate> {
        if let Some(rest) = name.strip_prefix("sparse-ssp") {
            let mut bounds = [1u32, 1];
            let mut parts = rest.split(':');
            if parts.next() != Some("") {
                return None;
            }
            for (i, b) in parts.enumerate() {
                *bounds.get_mut(i)? = b.parse().ok()?;
            }
            let [staleness, speculation] = bounds;
            return (speculation > 0).then_some(Gate::SparseSsp { staleness, speculation });
        }
        let (kind, bound) = match name.split_once(':') {
            Some((k, b)) => (k, Some(b.parse::<u32>().ok()?)),
            None => (name, None),
        };
        match (kind, bound) {
            ("async", None) => Some(Gate::Async),
            ("bsp", None) => Some(Gate::Bsp),
            ("ssp", b) => Some(Gate::Ssp { staleness: b.unwrap_or(1) }),
            ("bounded-delay", b) => Some(Gate::BoundedDelay { delay: b.unwrap_or(1) }),
            _ => None,
        }
    }

    /// The staleness bound of a gate that waits for other workers: `Some(0)` for BSP, `Some(s)`
    /// for SSP and SparseSSP; `None` for the others.
    pub const fn staleness(self) -> Option<u32> {
        match self {
            Gate::Bsp => Some(0),
            Gate::Ssp { staleness } | Gate::SparseSsp { staleness, .. } => Some(staleness),
            _ => None,
        }
    }

    /// SparseSSP's speculation: how many clocks beyond its staleness bound a worker may run
    /// on declared keys (0 for every other gate).
    pub const fn speculation(self) -> u32 {
        match self {
            Gate::SparseSsp { speculation, .. } => speculation,
            _ => 0,
        }
    }
}

/// The value a key has before anything was written to it.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
#[non_exhaustive]
pub enum Init {
    /// All zeros.
    #[default]
    Zero,
    /// Uniform in `[-scale, scale)`, a deterministic function of (seed, key, element).
    Uniform { scale: f32 },
}

/// Configuration of one node.
///
/// Made by [`Config::new`] with sensible bounds, then adjusted with the `with_*` setters (or
/// by assigning its public fields); `#[non_exhaustive]`, so that a field added later breaks no
/// caller. [`Config::validate`] checks it; nodes refuse one that does not pass.
///
/// ```
/// use parma_core::{Config, Gate, Layout, NodeId, Technique};
///
/// let cfg = Config::new(4, 2, Layout::uniform(1_000, 8)?)
///     .with_technique(Technique::Relocation)
///     .with_gate(Gate::Ssp { staleness: 2 })
///     .with_seed(7);
/// assert_eq!(cfg.gate, Gate::Ssp { staleness: 2 });
/// cfg.validate(NodeId(0))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// The cluster's identity; frames with another one are dropped.
    pub cluster_id: ClusterId,
    /// Number of nodes in the cluster.
    pub nodes: u16,
    /// Worker threads per node.
    pub workers_per_node: u16,
    /// Keys and their value lengths.
    pub layout: Layout,
    /// How parameters are managed.
    pub technique: Technique,
    /// When workers wait for each other at their clocks (the consistency model).
    pub gate: Gate,
    /// Where keys live before anything moves, and how stores keep their home keys.
    pub placement: Placement,
    /// Seed for initial values and for the nodes' random choices (combined with the node id).
    pub seed: u64,
    /// Initial values of keys.
    pub init: Init,
    /// Shards of the parameter store; a power of two, at most [`STORE_SHARDS_MAX`].
    pub store_shards: usize,
    /// Most main copies of keys homed on other nodes this node may hold (plus keys on their way
    /// here). Keys homed here do not count: the layout bounds them.
    pub store_keys_max: usize,
    /// Slots of the location cache (direct-mapped); a power of two.
    pub location_cache_slots: usize,
    /// Most requests this node may have outstanding at once.
    pub requests_pending_max: usize,
    /// Most operations that may wait at this node for keys that are on their way here.
    pub waiting_ops_max: usize,
    /// Most forwarding pointers (keys given away whose move the home node has not confirmed
    /// yet). When full, this node keeps keys instead of giving them away.
    pub pointers_max: usize,
    /// Most frames waiting in the outbox before worker commands get `Busy`.
    pub outbox_frames_max: usize,
    /// Largest frame, in bytes, sent or accepted. Larger batches are split.
    pub frame_len_max: usize,
    /// Most keys in one message (requests are split into several messages above this).
    pub keys_per_message_max: usize,
    /// An outstanding request fails with `Timeout` after this long.
    pub request_timeout: Duration,
    /// Action timing (AdaPM Algorithm 1): smoothing, quantile, initial estimate, or acting on
    /// every intent at once.
    pub timing: TimingParams,
    /// How long a key that moved to a node stays there at least (and at least one of that
    /// node's sync rounds) before the node moves it on. Requests that trail the key along its
    /// path then catch it, instead of chasing a key that several nodes ask for in turn.
    pub relocation_hold: Duration,
    /// Most sync rounds per second a node starts; `None` runs them back to back.
    pub sync_rounds_per_sec_max: Option<u32>,
    /// How long a node waits before the next sync round when a round had nothing to send.
    /// The only node of a cluster (without a staleness-bounded gate) runs rounds only while
    /// a worker waits for them (`wait_sync`).
    pub sync_idle_interval: Duration,
    /// Most intents a node keeps (signaled and not yet expired), over all its workers.
    pub intents_max: usize,
    /// Most keys in all the intents a node keeps.
    pub intent_keys_max: usize,
    /// Most replicas a node holds.
    pub replicas_max: usize,
    /// Keys replicated on every node under [`Technique::MultiTechnique`]; the same on all nodes.
    pub hot_keys: Arc<HashSet<Key>>,
    /// The sampling manager's pool size, use frequency, replacement and bounds.
    pub sampling: SamplingOptions,
}

impl Config {
    /// A configuration with sensible bounds for `nodes` nodes, `workers_per_node` workers each,
    /// and `layout`.
    pub fn new(nodes: u16, workers_per_node: u16, layout: Layout) -> Config {
        let derived = Config::derived_bound(nodes, &layout);
        Config {
            cluster_id: ClusterId(0x7061_726d),
            nodes,
            workers_per_node,
            layout,
            technique: Technique::default(),
            gate: Gate::Async,
            placement: Placement::default(),
            seed: 0x5eed,
            init: Init::Zero,
            store_shards: 256,
            store_keys_max: derived,
            location_cache_slots: 1 << 16,
            requests_pending_max: 1 << 14,
            waiting_ops_max: 1 << 16,
            pointers_max: 1 << 16,
            outbox_frames_max: 1 << 14,
            frame_len_max: 16 << 20,
            keys_per_message_max: 1 << 14,
            request_timeout: Duration::from_secs(60),
            timing: TimingParams::default(),
            sync_rounds_per_sec_max: None,
            relocation_hold: Duration(1000),
            sync_idle_interval: Duration(1000),
            intents_max: 1 << 20,
            intent_keys_max: 1 << 26,
            replicas_max: derived,
            hot_keys: Arc::new(HashSet::new()),
            sampling: SamplingOptions::default(),
        }
    }

    /// The bound [`Config::new`] gives `store_keys_max` and `replicas_max`: four times the
    /// keys one node is home for.
    pub(crate) fn derived_bound(nodes: u16, layout: &Layout) -> usize {
        let keys_homed = layout.key_end() / u64::from(nodes.max(1)) + 1;
        usize::try_from(keys_homed.saturating_mul(4)).unwrap_or(usize::MAX)
    }

    /// After the node count or the layout changed from ones that derived the bound `was`:
    /// the bounds derived from them follow, unless they were set to something else.
    pub(crate) fn rederive_bounds(&mut self, was: usize) {
        let now = Config::derived_bound(self.nodes, &self.layout);
        if self.store_keys_max == was {
            self.store_keys_max = now;
        }
        if self.replicas_max == was {
            self.replicas_max = now;
        }
    }

    /// Whether a node keeps intents for its sync rounds: the technique has rounds and the
    /// cluster more than one node (on one node every key is homed here and stays).
    pub fn keeps_intents(&self) -> bool {
        self.technique.uses_rounds() && self.nodes > 1
    }

    /// Whether a node does anything with an intent beyond counting it: it keeps it
    /// ([`Config::keeps_intents`]), or SparseSSP reads the declared keys. When false, a
    /// runtime's worker validates an intent and sends it nowhere.
    pub fn acts_on_intents(&self) -> bool {
        self.keeps_intents() || self.gate.speculation() > 0
    }

    /// What announcing the keys a worker will use in a clock window means under this
    /// configuration ([`Announcement`]): an intent under the techniques with sync rounds (and
    /// under SparseSSP, whose gate reads the declared keys, under every technique), a
    /// `localize` under relocation, nothing under static partitioning.
    pub fn announcement(&self) -> Announcement {
        Announcement {
            intent: self.technique.uses_rounds() || self.gate.speculation() > 0,
            localize: !self.technique.uses_rounds() && self.technique.uses_localize(),
        }
    }

    /// The cluster id this node's frames carry, and the only one it accepts: the 32-bit fold
    /// ([`crate::digest::fold32`]) of [`crate::digest::cluster_digest`] with no job and no
    /// peer timeout, a digest of what all nodes of a cluster must agree on (the cluster id,
    /// the node count, the layout, the placement, the technique, the gate and, under
    /// [`Technique::MultiTechnique`], the hot keys: [`Config::canonical_encoding`]). A node configured unlike its peers has its frames dropped by them, and
    /// drops theirs, counted in `Stats::frames_foreign`, instead of disagreeing with them
    /// about where keys live.
    pub fn wire_cluster(&self) -> ClusterId {
        ClusterId(crate::digest::fold32(crate::digest::cluster_digest(self, 0, None)))
    }

    /// The keys NuPS's heuristic replicates: those whose access frequency exceeds `factor`
    /// times the mean frequency (NuPS uses 100). `frequencies` are per key, from statistics
    /// the application supplies (e.g. counts in the training data); keys not listed count as 0
    /// in the mean over `keys_total` keys.
    pub fn hot_keys_from_frequencies(
        frequencies: impl IntoIterator<Item = (Key, u64)> + Clone,
        keys_total: u64,
        factor: f64,
    ) -> HashSet<Key> {
        let total: u64 = frequencies.clone().into_iter().map(|(_, f)| f).sum();
        let mean = total as f64 / keys_total.max(1) as f64;
        frequencies.into_iter().filter(|(_, f)| *f as f64 > factor * mean).map(|(k, _)| k).collect()
    }

    /// Checks every field; `me` is the node this configuration is for.
    pub fn validate(&self, me: NodeId) -> Result<(), ConfigError> {
        if self.nodes == 0 || self.nodes > NODES_MAX {
            return Err(ConfigError::NodeCount { nodes: self.nodes });
        }
        if me.0 >= self.nodes {
            return Err(ConfigError::NodeOutOfRange { node: me });
        }
        if self.workers_per_node == 0 {
            return Err(ConfigError::NoWorkers);
        }
        let pow2 = |n: usize, name| {
            if n == 0 || !n.is_power_of_two() {
                Err(ConfigError::Bound { name })
            } else {
                Ok(())
            }
        };
        pow2(self.store_shards, "store_shards")?;
        if self.store_shards > STORE_SHARDS_MAX {
            return Err(ConfigError::Bound { name: "store_shards" });
        }
        pow2(self.location_cache_slots, "location_cache_slots")?;
        let positive = |n: usize, name| if n == 0 { Err(ConfigError::Bound { name }) } else { Ok(()) };
        positive(self.requests_pending_max, "requests_pending_max")?;
        positive(self.waiting_ops_max, "waiting_ops_max")?;
        positive(self.pointers_max, "pointers_max")?;
        positive(self.outbox_frames_max, "outbox_frames_max")?;
        positive(self.keys_per_message_max, "keys_per_message_max")?;
        // A frame must hold at least one key with the longest value.
        let one = crate::wire::HEADER_LEN + 64 + 16 + 4 * self.layout.len_max();
        if self.frame_len_max < one || self.frame_len_max > u32::MAX as usize {
            return Err(ConfigError::Bound { name: "frame_len_max" });
        }
        if self.request_timeout.as_micros() == 0 {
            return Err(ConfigError::Bound { name: "request_timeout" });
        }
        positive(self.intents_max, "intents_max")?;
        positive(self.intent_keys_max, "intent_keys_max")?;
        if matches!(self.gate, Gate::SparseSsp { speculation: 0, .. }) {
            return Err(ConfigError::Bound { name: "gate speculation" });
        }
        if self.sync_idle_interval.as_micros() == 0 || self.sync_rounds_per_sec_max == Some(0) {
            return Err(ConfigError::Bound { name: "sync_idle_interval" });
        }
        let t = &self.timing;
        if !(t.alpha > 0.0 && t.alpha <= 1.0 && t.p > 0.0 && t.p < 1.0 && t.lambda0 >= 0.0) {
            return Err(ConfigError::Bound { name: "timing" });
        }
        if !self.sampling.is_valid() || u64::from(self.sampling.pool_size) > self.sampling.sample_size_max {
            return Err(ConfigError::Bound { name: "sampling" });
        }
        if self.technique == Technique::FullReplication {
            let keys = usize::try_from(self.layout.key_end()).unwrap_or(usize::MAX);
            if keys > self.replicas_max || keys > self.intent_keys_max {
                return Err(ConfigError::Bound { name: "replicas_max" });
            }
        }
        if self.technique == Technique::MultiTechnique
            && (self.hot_keys.len() > self.replicas_max
                || !self.hot_keys.iter().all(|k| self.layout.contains(*k)))
        {
            return Err(ConfigError::Bound { name: "hot_keys" });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_shards_are_a_bounded_power_of_two() {
        let base = Config::new(2, 1, Layout::uniform(100, 4).unwrap());
        let with = |n: usize| base.clone().with_store_shards(n).validate(NodeId(0));
        assert_eq!(with(1), Ok(()));
        assert_eq!(with(STORE_SHARDS_MAX), Ok(()));
        for bad in [0, 3, STORE_SHARDS_MAX * 2] {
            assert_eq!(with(bad), Err(ConfigError::Bound { name: "store_shards" }), "{bad} shards");
        }
    }

    #[test]
    fn changing_nodes_or_layout_derives_the_bounds_again_unless_they_were_set() {
        let small = Layout::uniform(100, 4).unwrap();
        let big = Layout::uniform(1_000_000, 4).unwrap();
        let bounds = |c: &Config| (c.store_keys_max, c.replicas_max);
        let made = Config::new(4, 1, big.clone());
        assert_eq!(
            bounds(&Config::new(1, 1, small.clone()).with_layout(big.clone()).with_nodes(4)),
            bounds(&made)
        );
        assert_eq!(bounds(&Config::new(1, 1, big.clone()).with_nodes(4)), bounds(&made));
        // A bound the caller chose stays; the other still follows.
        let set = Config::new(1, 1, small).with_replicas_max(77).with_layout(big.clone());
        assert_eq!(bounds(&set), (Config::new(1, 1, big).store_keys_max, 77));
        assert_eq!(set.validate(NodeId(0)), Ok(()));
    }

    #[test]
    fn announcing_is_an_intent_a_localize_or_nothing_by_technique() {
        let mut cfg = Config::new(2, 1, Layout::uniform(100, 4).unwrap());
        let plan = |c: &Config| (c.announcement().intent(), c.announcement().localize());
        for t in Technique::ALL {
            cfg.technique = t;
            let expected = match t {
                Technique::StaticPartitioning => (false, false),
                Technique::Relocation => (false, true),
                _ => (true, false),
            };
            assert_eq!(plan(&cfg), expected, "{}", t.name());
        }
        // SparseSSP reads the declared keys under every technique; relocation still localizes.
        cfg.gate = Gate::SparseSsp { staleness: 1, speculation: 2 };
        for t in [Technique::StaticPartitioning, Technique::Relocation] {
            cfg.technique = t;
            assert_eq!(plan(&cfg), (true, t == Technique::Relocation), "{} under SparseSSP", t.name());
        }
    }

    #[test]
    fn gates_have_names_that_parse_back_and_enter_the_digest() {
        for g in [
            Gate::Async,
            Gate::Bsp,
            Gate::Ssp { staleness: 3 },
            Gate::BoundedDelay { delay: 0 },
            Gate::SparseSsp { staleness: 2, speculation: 3 },
        ] {
            assert_eq!(Gate::from_name(&g.name()), Some(g));
        }
        assert_eq!(Gate::from_name("ssp"), Some(Gate::Ssp { staleness: 1 }));
        assert_eq!(Gate::from_name("sparse-ssp"), Some(Gate::SparseSsp { staleness: 1, speculation: 1 }));
        assert_eq!(Gate::from_name("sparse-ssp:3"), Some(Gate::SparseSsp { staleness: 3, speculation: 1 }));
        for bad in [
            "",
            "ssp:",
            "ssp:-1",
            "bsp:2",
            "async:0",
            "sync",
            "bounded-delay:x",
            "sparse-ssp:1:0",
            "sparse-ssp:1:2:3",
            "sparse-sspx",
            "sparse-ssp:",
        ] {
            assert_eq!(Gate::from_name(bad), None, "{bad}");
        }
        let base = Config::new(2, 1, Layout::uniform(100, 4).unwrap());
        let bsp = base.clone().with_gate(Gate::Bsp);
        let ssp = base.clone().with_gate(Gate::Ssp { staleness: 0 });
        assert_ne!(base.wire_cluster(), bsp.wire_cluster());
        assert_ne!(bsp.wire_cluster(), ssp.wire_cluster());
    }
}

/// What a worker's announcement of keys for a clock window does under a configuration
/// ([`Config::announcement`]). Runtimes and drivers carry it out; the decision is core's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Announcement {
    intent: bool,
    localize: bool,
}

impl Announcement {
    /// Whether the keys become an intent for the window (the node's action timing then
    /// decides when to relocate or replicate them; SparseSSP's gate reads them).
    pub const fn intent(self) -> bool {
        self.intent
    }

    /// Whether the keys are localized (moved to the worker's node) at once, to be waited for
    /// before the window's first access.
    pub const fn localize(self) -> bool {
        self.localize
    }
}

//! The configuration digest: what every node of a cluster must agree on, as one 64-bit number.
//! Computed here and nowhere else: the session handshake and the rendezvous carry
//! [`cluster_digest`], and the frame header's cluster field ([`Config::wire_cluster`]) is
//! [`fold32`] of it with no job and no peer timeout. `docs/session.md` ("The configuration
//! digest") specifies it byte by byte, for implementations in other languages.
//!
//! The hash is FNV-1a with 64 bits ([`fnv1a`]); its input is
//! [`Config::canonical_encoding`] followed by the job digest and the peer timeout, each a
//! little-endian `u64`.

use alloc::vec::Vec;

use crate::config::{Config, Gate, Placement, Technique};
use crate::session::SessionOptions;

/// The version of [`Config::canonical_encoding`]: its sixth and seventh bytes.
pub const CANONICAL_VERSION: u16 = 1;

/// The first bytes of [`Config::canonical_encoding`].
pub const CANONICAL_MAGIC: [u8; 4] = *b"PRMC";

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a with 64 bits of `bytes`: start at `0xcbf29ce484222325`; for each byte, xor it into the
/// low byte, then multiply by `0x100000001b3` modulo 2^64.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(FNV_PRIME))
}

/// The digest every node of a multi-process cluster shows in its session handshake and at the
/// rendezvous: [`fnv1a`] of [`Config::canonical_encoding`], then `job` (a digest of whatever
/// else the nodes must agree on, e.g. a training task's options, from [`fnv1a`] of their text;
/// 0 for none) and the peer timeout in microseconds (0 for none), both little-endian `u64`s.
/// The peer timeout is in it because a node heartbeats every tenth of its own: a node with a
/// longer one would look silent to a node with a shorter one.
pub fn cluster_digest(cfg: &Config, job: u64, peer_timeout: Option<core::time::Duration>) -> u64 {
    let timeout_us = peer_timeout.map_or(0, |t| u64::try_from(t.as_micros()).unwrap_or(u64::MAX));
    let mut input = cfg.canonical_encoding();
    input.extend_from_slice(&job.to_le_bytes());
    input.extend_from_slice(&timeout_us.to_le_bytes());
    fnv1a(&input)
}

/// The digest a session's handshake carries and compares ([`crate::session::Session`] computes
/// it from the configuration digest its [`crate::session::Identity`] was given): [`fnv1a`] of
/// `config_digest` and [`SessionOptions::agreed_encoding`], so that two ends whose sessions
/// could not work together (frames one end would drop as too long, heartbeats rarer than the
/// other end's peer timeout) refuse each other at the handshake, with every embedder's
/// transport, whatever digest it was given.
pub fn session_digest(config_digest: u64, opts: &SessionOptions) -> u64 {
    let mut input = [0u8; 8 + SESSION_AGREED_LEN];
    input[..8].copy_from_slice(&config_digest.to_le_bytes());
    input[8..].copy_from_slice(&opts.agreed_encoding());
    fnv1a(&input)
}

/// The length of [`SessionOptions::agreed_encoding`].
pub const SESSION_AGREED_LEN: usize = 32;

impl SessionOptions {
    /// The options both ends of a session must agree on, as [`session_digest`] hashes them:
    /// `frame_len_max`, `window_bytes_max`, `heartbeat_interval` (µs) and `peer_timeout` (µs),
    /// each a little-endian `u64`. A receiver drops a frame longer than its own
    /// `frame_len_max`, acknowledges every eighth of its own `window_bytes_max`, and fails a
    /// peer silent for its own `peer_timeout` while the peer heartbeats at its own interval.
    /// The other options (receive bounds, retransmission, handshake and reconnection timers)
    /// may differ between nodes.
    pub fn agreed_encoding(&self) -> [u8; SESSION_AGREED_LEN] {
        let mut b = [0u8; SESSION_AGREED_LEN];
        let fields = [
            self.frame_len_max as u64,
            self.window_bytes_max as u64,
            self.heartbeat_interval.0,
            self.peer_timeout.0,
        ];
        for (chunk, v) in b.chunks_exact_mut(8).zip(fields) {
            chunk.copy_from_slice(&v.to_le_bytes());
        }
        b
    }
}

/// The 32 bits a frame header carries of a 64-bit digest: its low half xor its high half.
pub const fn fold32(digest: u64) -> u32 {
    (digest ^ (digest >> 32)) as u32
}

/// The code of a technique in the canonical encoding.
pub(crate) const fn technique_code(t: Technique) -> u8 {
    match t {
        Technique::Adaptive => 0,
        Technique::AdaptiveNoReplication => 1,
        Technique::AdaptiveNoRelocation => 2,
        Technique::StaticPartitioning => 3,
        Technique::Relocation => 4,
        Technique::FullReplication => 5,
        Technique::MultiTechnique => 6,
    }
}

/// The code of a placement in the canonical encoding.
pub(crate) const fn placement_code(p: Placement) -> u8 {
    match p {
        Placement::Hashed => 0,
        Placement::Dense => 1,
    }
}

/// The code and the two bounds of a gate in the canonical encoding.
pub(crate) const fn gate_code(g: Gate) -> (u8, u32, u32) {
    match g {
        Gate::Async => (0, 0, 0),
        Gate::Bsp => (1, 0, 0),
        Gate::Ssp { staleness } => (2, staleness, 0),
        Gate::BoundedDelay { delay } => (3, delay, 0),
        Gate::SparseSsp { staleness, speculation } => (4, staleness, speculation),
    }
}

impl Config {
    /// The bytes the configuration digest is computed over ([`cluster_digest`]): what every
    /// node of a cluster must agree on, in one encoding. Version [`CANONICAL_VERSION`];
    /// integers little-endian, no padding:
    ///
    /// | offset | size | field |
    /// |---|---|---|
    /// | 0 | 4 | `PRMC` |
    /// | 4 | 2 | version, `1` |
    /// | 6 | 4 | `cluster_id` |
    /// | 10 | 2 | `nodes` |
    /// | 12 | 1 | `placement`: 0 hashed, 1 dense |
    /// | 13 | 1 | `technique`: 0 adaptive, 1 adaptive-no-replication, 2 adaptive-no-relocation, 3 static, 4 relocation, 5 full-replication, 6 multi-technique |
    /// | 14 | 1 | `gate`: 0 async, 1 bsp, 2 ssp, 3 bounded-delay, 4 sparse-ssp |
    /// | 15 | 4 | the gate's staleness (ssp, sparse-ssp) or delay (bounded-delay), else 0 |
    /// | 19 | 4 | the gate's speculation (sparse-ssp), else 0 |
    /// | 23 | 8 | the layout's `key_end` |
    /// | 31 | 4 | `r`, the layout's ranges |
    /// | 35 | 12·r | each range: first key (u64), value length (u32), in increasing order of first key; the first starts at 0, and two neighbours never have the same length (a uniform layout is one range) |
    /// | 35 + 12·r | 8 | `h`, the hot keys (0 unless the technique is multi-technique) |
    /// | 43 + 12·r | 8·h | the hot keys (u64), in increasing order |
    ///
    /// Nothing else of the configuration is in it: bounds, timers and seeds may differ
    /// between nodes.
    pub fn canonical_encoding(&self) -> Vec<u8> {
        let ranges = self.layout.canonical_ranges();
        let mut hot: Vec<u64> = if self.technique == Technique::MultiTechnique {
            self.hot_keys.iter().map(|k| k.0).collect()
        } else {
            Vec::new()
        };
        hot.sort_unstable();
        let mut b = Vec::with_capacity(43 + 12 * ranges.len() + 8 * hot.len());
        b.extend_from_slice(&CANONICAL_MAGIC);
        b.extend_from_slice(&CANONICAL_VERSION.to_le_bytes());
        b.extend_from_slice(&self.cluster_id.0.to_le_bytes());
        b.extend_from_slice(&self.nodes.to_le_bytes());
        b.push(placement_code(self.placement));
        b.push(technique_code(self.technique));
        let (gate, bound, speculation) = gate_code(self.gate);
        b.push(gate);
        b.extend_from_slice(&bound.to_le_bytes());
        b.extend_from_slice(&speculation.to_le_bytes());
        b.extend_from_slice(&self.layout.key_end().to_le_bytes());
        b.extend_from_slice(&(ranges.len() as u32).to_le_bytes());
        for (first, len) in &ranges {
            b.extend_from_slice(&first.to_le_bytes());
            b.extend_from_slice(&len.to_le_bytes());
        }
        b.extend_from_slice(&(hot.len() as u64).to_le_bytes());
        for k in &hot {
            b.extend_from_slice(&k.to_le_bytes());
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{ClusterId, Key};
    use crate::layout::Layout;
    use alloc::sync::Arc;

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn the_encoding_has_the_documented_layout() {
        let cfg = Config::new(3, 1, Layout::uniform(1000, 8).unwrap());
        let e = cfg.canonical_encoding();
        assert_eq!(e.len(), 43 + 12);
        assert_eq!(&e[..6], b"PRMC\x01\x00");
        assert_eq!(&e[6..10], &0x7061_726du32.to_le_bytes());
        assert_eq!(&e[10..12], &3u16.to_le_bytes());
        assert_eq!(e[12..15], [1, 0, 0]); // dense, adaptive, async
        assert_eq!(&e[23..31], &1000u64.to_le_bytes());
        assert_eq!(&e[31..35], &1u32.to_le_bytes());
        assert_eq!(&e[35..47], &[0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0]);
        assert_eq!(&e[47..55], &0u64.to_le_bytes());
    }

    #[test]
    fn equal_layouts_encode_alike_and_every_shared_field_counts() {
        let base = Config::new(2, 1, Layout::uniform(100, 4).unwrap());
        let split =
            Config { layout: Layout::ranges(100, alloc::vec![(0, 4), (50, 4)]).unwrap(), ..base.clone() };
        assert_eq!(base.canonical_encoding(), split.canonical_encoding());
        // What may differ between nodes does not count.
        let local = Config { workers_per_node: 7, seed: 1, store_shards: 2, ..base.clone() };
        assert_eq!(cluster_digest(&base, 0, None), cluster_digest(&local, 0, None));
        // Hot keys count under the multi-technique only, in any order.
        let hot = |keys: &[u64]| Arc::new(keys.iter().map(|k| Key(*k)).collect());
        let ignored = Config { hot_keys: hot(&[1, 2]), ..base.clone() };
        assert_eq!(base.canonical_encoding(), ignored.canonical_encoding());
        let multi = Config { technique: Technique::MultiTechnique, hot_keys: hot(&[3, 1]), ..base.clone() };
        assert_eq!(multi.canonical_encoding().len(), 43 + 12 + 16);
        let differ = [
            Config { cluster_id: ClusterId(1), ..base.clone() },
            Config { nodes: 3, ..base.clone() },
            Config { placement: Placement::Hashed, ..base.clone() },
            Config { technique: Technique::Relocation, ..base.clone() },
            Config { gate: Gate::Ssp { staleness: 0 }, ..base.clone() },
            Config { gate: Gate::Bsp, ..base.clone() },
            Config { layout: Layout::uniform(101, 4).unwrap(), ..base.clone() },
            Config { layout: Layout::ranges(100, alloc::vec![(0, 4), (50, 2)]).unwrap(), ..base.clone() },
            multi.clone(),
            Config { hot_keys: hot(&[3, 2]), ..multi.clone() },
        ];
        for (i, c) in differ.iter().enumerate() {
            assert_ne!(cluster_digest(c, 0, None), cluster_digest(&base, 0, None), "{i}");
            assert_ne!(c.wire_cluster(), base.wire_cluster(), "{i}");
        }
        let d = cluster_digest(&base, 0, None);
        assert_ne!(d, cluster_digest(&base, 1, None));
        assert_ne!(d, cluster_digest(&base, 0, Some(core::time::Duration::from_secs(5))));
        assert_eq!(base.wire_cluster(), ClusterId(fold32(d)));
    }
}

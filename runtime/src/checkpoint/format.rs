//! The files of a checkpoint: the manifest (JSON) and the per-node part files (binary).
//!
//! A part file, all numbers little-endian:
//!
//! | bytes | what |
//! | --- | --- |
//! | 8 | magic `PARMACKP` |
//! | 4 | format version (1) |
//! | 4 | the node that wrote it |
//! | 8 | the clock of the worker that wrote it |
//! | 8 | records |
//! | … | per record, keys strictly increasing: key (`u64`), value length (`u32`), the value (`f32` × length) |
//!
//! The manifest names every part with its size and SHA-256; a reader checks them before it
//! parses a part.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufReader, ErrorKind, Read};

use parma_core::{fold_digest, Config, Init, Key, Layout};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The name of the manifest in a checkpoint directory.
pub const MANIFEST: &str = "manifest.json";
/// What the manifest's `format` field says.
pub const FORMAT: &str = "parma-checkpoint";
/// The version of the manifest and part formats.
pub const VERSION: u32 = 1;

const MAGIC: &[u8; 8] = b"PARMACKP";
/// Bytes before a part's first record.
pub(crate) const PART_HEADER: usize = 32;

/// The name of node `node`'s part file.
pub fn part_name(node: u16) -> String {
    format!("part-{node:05}.bin")
}

/// The name of the file in which node `node`'s writer records its part's SHA-256 and size
/// (`<hex> <bytes>`), for node 0 to write the manifest from without reading every part again.
pub fn sum_name(node: u16) -> String {
    format!("part-{node:05}.sha256")
}

/// The sum file's text for a part of SHA-256 `sha` (hex) and `bytes` bytes.
pub(crate) fn encode_sum(sha: &str, bytes: u64) -> String {
    format!("{sha} {bytes}\n")
}

/// A sum file's (SHA-256 hex, bytes); `None` if it is not one.
pub(crate) fn decode_sum(text: &str) -> Option<(String, u64)> {
    let (sha, bytes) = text.trim_end().split_once(' ')?;
    let ok = sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    Some((sha.to_string(), bytes.parse().ok()?)).filter(|_| ok)
}

/// The initial value of keys never written, as the manifest records it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InitRecord {
    /// All zeros.
    Zero,
    /// Uniform in `[-scale, scale)`, a function of (seed, key, element).
    Uniform {
        /// The half-width.
        scale: f32,
    },
}

impl InitRecord {
    /// The record of `init`.
    pub fn of(init: Init) -> InitRecord {
        match init {
            Init::Uniform { scale } => InitRecord::Uniform { scale },
            _ => InitRecord::Zero,
        }
    }

    /// The `Init` it records.
    pub fn init(self) -> Init {
        match self {
            InitRecord::Zero => Init::Zero,
            InitRecord::Uniform { scale } => Init::Uniform { scale },
        }
    }
}

/// One part file as the manifest lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartRecord {
    /// The file's name in the directory.
    pub file: String,
    /// The node that wrote it.
    pub node: u16,
    /// Main copies in it.
    pub keys: u64,
    /// Its size in bytes.
    pub bytes: u64,
    /// The SHA-256 of its bytes, in hex.
    pub sha256: String,
    /// The clock of the worker that wrote it.
    pub clock: u64,
}

/// What a checkpoint is of: its `manifest.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`VERSION`].
    pub version: u32,
    /// Keys `0..key_end` exist.
    pub key_end: u64,
    /// The value length of every key, if uniform.
    pub value_len: Option<u32>,
    /// The longest value.
    pub value_len_max: u32,
    /// [`Layout::digest`] of the layout (the key range and every value length).
    pub layout_digest: u64,
    /// The value of keys never written (absent from every part).
    pub init: InitRecord,
    /// The configuration's seed (the initial values are a function of it).
    pub seed: u64,
    /// What a cluster must agree on to load this checkpoint: [`model_digest`].
    pub config_digest: u64,
    /// The management technique of the cluster that wrote it (a restore may use another).
    pub technique: String,
    /// The placement of the cluster that wrote it (a restore may use another).
    pub placement: String,
    /// Nodes of the cluster that wrote it (a restore may use another number).
    pub nodes: u16,
    /// Workers per node of that cluster.
    pub workers_per_node: u16,
    /// The parts, one per node, in node order.
    pub parts: Vec<PartRecord>,
    /// What the application recorded with the checkpoint (e.g. the training epoch).
    #[serde(default)]
    pub extra: BTreeMap<String, String>,
}

/// The digest of what a restoring cluster must agree on with the checkpoint: the layout, the
/// initial values and the seed (values of keys never written are a function of them).
/// Neither the node count, the technique nor the placement is in it.
pub fn model_digest(layout: &Layout, init: Init, seed: u64) -> u64 {
    digest_of(layout.digest(), InitRecord::of(init), seed)
}

/// [`model_digest`] from what the manifest records.
pub(crate) fn model_digest_of(m: &Manifest) -> Option<u64> {
    Some(digest_of(m.layout_digest, m.init, m.seed))
}

fn digest_of(layout_digest: u64, init: InitRecord, seed: u64) -> u64 {
    let (tag, scale) = match init {
        InitRecord::Zero => (0u64, 0u64),
        InitRecord::Uniform { scale } => (1, u64::from(scale.to_bits())),
    };
    [tag, scale, seed].into_iter().fold(fold_digest(0x636b_7074, layout_digest), fold_digest)
}

impl Manifest {
    /// The manifest of `cfg`'s model with `parts` (extra left empty).
    pub fn new(cfg: &Config, parts: Vec<PartRecord>) -> Manifest {
        Manifest {
            format: FORMAT.to_string(),
            version: VERSION,
            key_end: cfg.layout.key_end(),
            value_len: cfg.layout.uniform_len().map(|l| l as u32),
            value_len_max: cfg.layout.len_max() as u32,
            layout_digest: cfg.layout.digest(),
            init: InitRecord::of(cfg.init),
            seed: cfg.seed,
            config_digest: model_digest(&cfg.layout, cfg.init, cfg.seed),
            technique: cfg.technique.name().to_string(),
            placement: cfg.placement.name().to_string(),
            nodes: cfg.nodes,
            workers_per_node: cfg.workers_per_node,
            parts,
            extra: BTreeMap::new(),
        }
    }

    /// Main copies over all parts.
    pub fn keys(&self) -> u64 {
        self.parts.iter().map(|p| p.keys).sum()
    }
}

/// The SHA-256 of `bytes` in lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lower-case hex of a finished SHA-256.
pub(crate) fn hex(digest: &[u8]) -> String {
    let mut s = String::with_capacity(2 * digest.len());
    for b in digest {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// A part's header: node, clock and the number of records that follow.
pub(crate) fn encode_header(node: u16, clock: u64, records: u64) -> [u8; PART_HEADER] {
    let mut h = [0u8; PART_HEADER];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&u32::from(node).to_le_bytes());
    h[16..24].copy_from_slice(&clock.to_le_bytes());
    h[24..32].copy_from_slice(&records.to_le_bytes());
    h
}

/// Appends one record, `key` and its value, to `out`.
pub(crate) fn encode_record(out: &mut Vec<u8>, key: Key, value: &[f32]) {
    out.extend_from_slice(&key.0.to_le_bytes());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    let at = out.len();
    out.resize(at + 4 * value.len(), 0);
    for (b, x) in out[at..].chunks_exact_mut(4).zip(value) {
        b.copy_from_slice(&x.to_le_bytes());
    }
}

/// Encodes a whole part in memory: `entries` are (key, value) with keys strictly increasing.
/// (Checkpoints stream their parts, header then records; this is the same bytes at once.)
#[cfg(test)]
pub(crate) fn encode_part<'a>(
    node: u16,
    clock: u64,
    count: usize,
    entries: impl Iterator<Item = (Key, &'a [f32])>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(PART_HEADER + count * 16);
    out.extend_from_slice(&encode_header(node, clock, count as u64));
    for (k, v) in entries {
        encode_record(&mut out, k, v);
    }
    out
}

/// A part's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PartHeader {
    pub(crate) node: u16,
    pub(crate) clock: u64,
    pub(crate) records: u64,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Parses a part's header; the reason if it is not one.
pub(crate) fn part_header(b: &[u8]) -> Result<PartHeader, String> {
    if b.len() < PART_HEADER {
        return Err(format!("{} bytes, shorter than a part's {PART_HEADER}-byte header", b.len()));
    }
    if &b[..8] != MAGIC {
        return Err("it does not start with a part's magic bytes".into());
    }
    let version = u32_at(b, 8).unwrap_or(0);
    if version != VERSION {
        return Err(format!("part format version {version}, this parma reads {VERSION}"));
    }
    let node = u32_at(b, 12).unwrap_or(u32::MAX);
    let node = u16::try_from(node).map_err(|_| format!("node {node} in its header"))?;
    Ok(PartHeader { node, clock: u64_at(b, 16).unwrap_or(0), records: u64_at(b, 24).unwrap_or(0) })
}

/// Walks a part's records after its header: `f` gets each (key, value); values are decoded
/// into `scratch`. The reason if the records are malformed (truncated, keys not increasing,
/// trailing bytes, a length `len_ok` refuses). The reference over a slice that the tests hold
/// [`PartReader`] to.
#[cfg(test)]
pub(crate) fn walk_part(
    b: &[u8],
    h: &PartHeader,
    len_ok: impl Fn(Key, usize) -> Result<(), String>,
    mut f: impl FnMut(Key, &[f32]),
) -> Result<(), String> {
    let mut at = PART_HEADER;
    let mut last: Option<u64> = None;
    let mut scratch = Vec::new();
    for i in 0..h.records {
        let (Some(key), Some(len)) = (u64_at(b, at), u32_at(b, at + 8)) else {
            return Err(format!("truncated at record {i} of {}", h.records));
        };
        if last.is_some_and(|l| key <= l) {
            return Err(format!("key {key} after key {}: keys are not increasing", last.unwrap_or(0)));
        }
        last = Some(key);
        len_ok(Key(key), len as usize)?;
        at += 12;
        let bytes = (len as usize).checked_mul(4).ok_or("value length overflows")?;
        let Some(raw) = b.get(at..at + bytes) else {
            return Err(format!("truncated in the value of key {key} (record {i} of {})", h.records));
        };
        scratch.clear();
        scratch.extend(raw.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])));
        f(Key(key), &scratch);
        at += bytes;
    }
    if at != b.len() {
        return Err(format!("{} bytes after its last record", b.len() - at));
    }
    Ok(())
}

/// A reader that feeds every byte it reads into a SHA-256 and counts them.
pub(crate) struct Hashing<R> {
    inner: R,
    sha: Sha256,
    bytes: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.sha.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

/// Why a streamed part could not be read: the file could not be read, or its bytes are not a
/// part (the reason, as [`walk_part`] gives it).
#[derive(Debug)]
pub(crate) enum StreamError {
    Io(std::io::Error),
    Malformed(String),
}

impl From<String> for StreamError {
    fn from(s: String) -> StreamError {
        StreamError::Malformed(s)
    }
}

/// [`walk_part`] over a byte stream instead of a slice: the part is read through a buffer of
/// `buffer` bytes, so its memory is that buffer and one value whatever the part's size. Every
/// byte read is hashed; [`PartReader::finish`] reads to the end and gives the SHA-256 and size
/// of the whole stream, also after an error, so that a caller can tell a damaged file (its
/// checksum differs) from a malformed one.
pub(crate) struct PartReader<R: Read> {
    src: BufReader<Hashing<R>>,
    header: PartHeader,
    next: u64,
    last: Option<u64>,
    raw: Vec<u8>,
    value: Vec<f32>,
}

impl<R: Read> PartReader<R> {
    /// A reader of the part in `inner` through a buffer of `buffer` bytes; read its header
    /// first ([`PartReader::read_header`]).
    pub(crate) fn new(inner: R, buffer: usize) -> PartReader<R> {
        let src = BufReader::with_capacity(buffer.max(1), Hashing { inner, sha: Sha256::new(), bytes: 0 });
        let header = PartHeader { node: 0, clock: 0, records: 0 };
        PartReader { src, header, next: 0, last: None, raw: Vec::new(), value: Vec::new() }
    }

    /// Reads and parses the part's header (before any record).
    pub(crate) fn read_header(&mut self) -> Result<PartHeader, StreamError> {
        let mut head = [0u8; PART_HEADER];
        let mut got = 0;
        while got < PART_HEADER {
            match self.src.read(&mut head[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(StreamError::Io(e)),
            }
        }
        self.header = part_header(&head[..got])?;
        Ok(self.header)
    }

    /// The next record's key (its value is then [`PartReader::value`]), `None` after the last
    /// one, which is when trailing bytes are refused.
    pub(crate) fn next(
        &mut self,
        len_ok: impl Fn(Key, usize) -> Result<(), String>,
    ) -> Result<Option<Key>, StreamError> {
        let (i, n) = (self.next, self.header.records);
        if i == n {
            let mut probe = [0u8; 1];
            return match self.read_full(&mut probe) {
                Ok(true) => {
                    let rest = std::io::copy(&mut self.src, &mut std::io::sink()).map_err(StreamError::Io)?;
                    Err(StreamError::Malformed(format!("{} bytes after its last record", rest + 1)))
                }
                Ok(false) => Ok(None),
                Err(e) => Err(e),
            };
        }
        let mut head = [0u8; 12];
        if !self.read_full(&mut head)? {
            return Err(StreamError::Malformed(format!("truncated at record {i} of {n}")));
        }
        let (key, len) = (u64_at(&head, 0).unwrap_or(0), u32_at(&head, 8).unwrap_or(0));
        if let Some(l) = self.last.filter(|l| key <= *l) {
            return Err(StreamError::Malformed(format!("key {key} after key {l}: keys are not increasing")));
        }
        self.last = Some(key);
        len_ok(Key(key), len as usize)?;
        let bytes = (len as usize).checked_mul(4).ok_or_else(|| "value length overflows".to_string())?;
        self.raw.resize(bytes, 0);
        let mut raw = std::mem::take(&mut self.raw);
        let full = self.read_full(&mut raw);
        self.raw = raw;
        if !full? {
            return Err(StreamError::Malformed(format!(
                "truncated in the value of key {key} (record {i} of {n})"
            )));
        }
        self.value.clear();
        self.value.extend(self.raw.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])));
        self.next += 1;
        Ok(Some(Key(key)))
    }

    /// The value of the record [`PartReader::next`] returned last.
    pub(crate) fn value(&self) -> &[f32] {
        &self.value
    }

    /// Reads the rest of the stream; its SHA-256 in hex and its size in bytes.
    pub(crate) fn finish(mut self) -> Result<(String, u64), std::io::Error> {
        std::io::copy(&mut self.src, &mut std::io::sink())?;
        let h = self.src.into_inner();
        Ok((hex(&h.sha.finalize()), h.bytes))
    }

    /// Fills `buf`; false if the stream ended first.
    fn read_full(&mut self, buf: &mut [u8]) -> Result<bool, StreamError> {
        match self.src.read_exact(buf) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => Ok(false),
            Err(e) => Err(StreamError::Io(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_round_trips_and_damage_is_named() {
        let vals = [[1.0f32, -2.5], [f32::MIN_POSITIVE, 7.0]];
        let b = encode_part(3, 9, 2, [(Key(4), &vals[0][..]), (Key(10), &vals[1][..])].into_iter());
        let h = part_header(&b).unwrap();
        assert_eq!(h, PartHeader { node: 3, clock: 9, records: 2 });
        let mut got = Vec::new();
        walk_part(&b, &h, |_, _| Ok(()), |k, v| got.push((k, v.to_vec()))).unwrap();
        assert_eq!(got, vec![(Key(4), vals[0].to_vec()), (Key(10), vals[1].to_vec())]);
        let short = &b[..b.len() - 1];
        assert!(walk_part(short, &h, |_, _| Ok(()), |_, _| {}).unwrap_err().contains("truncated"));
        assert!(part_header(&b[..10]).unwrap_err().contains("shorter"));
        let mut long = b.clone();
        long.push(0);
        assert!(walk_part(&long, &h, |_, _| Ok(()), |_, _| {}).unwrap_err().contains("after its last"));
    }

    /// Every record and every refusal of [`walk_part`], through [`PartReader`] and a buffer
    /// of `buffer` bytes.
    fn stream(b: &[u8], buffer: usize) -> Result<Vec<(Key, Vec<f32>)>, String> {
        let mut r = PartReader::new(b, buffer);
        r.read_header().map_err(|e| format!("{e:?}"))?;
        let mut got = Vec::new();
        loop {
            match r.next(|_, _| Ok(())) {
                Ok(Some(k)) => got.push((k, r.value().to_vec())),
                Ok(None) => break,
                Err(StreamError::Malformed(e)) => return Err(e),
                Err(StreamError::Io(e)) => return Err(e.to_string()),
            }
        }
        let (sha, bytes) = r.finish().unwrap();
        assert_eq!((sha, bytes), (sha256_hex(b), b.len() as u64));
        Ok(got)
    }

    #[test]
    fn the_streaming_reader_agrees_with_the_slice_walk_at_any_buffer() {
        let vals: Vec<Vec<f32>> = (0..5).map(|k| (0..k + 1).map(|i| (k * 10 + i) as f32).collect()).collect();
        let b = encode_part(1, 2, 5, vals.iter().enumerate().map(|(k, v)| (Key(3 * k as u64), &v[..])));
        let h = part_header(&b).unwrap();
        let mut want = Vec::new();
        walk_part(&b, &h, |_, _| Ok(()), |k, v| want.push((k, v.to_vec()))).unwrap();
        let mut long = b.clone();
        long.extend([0, 0, 0]);
        for buffer in 1..=b.len() + 1 {
            assert_eq!(stream(&b, buffer).as_ref(), Ok(&want), "buffer {buffer}");
            for cut in [PART_HEADER + 5, PART_HEADER + 14, b.len() - 1] {
                let short = &b[..cut];
                let slice = walk_part(short, &h, |_, _| Ok(()), |_, _| {}).unwrap_err();
                assert_eq!(stream(short, buffer), Err(slice), "buffer {buffer}, cut at {cut}");
            }
            let slice = walk_part(&long, &h, |_, _| Ok(()), |_, _| {}).unwrap_err();
            assert_eq!(stream(&long, buffer), Err(slice), "buffer {buffer}, trailing bytes");
        }
    }
}

//! Reading a checkpoint: the manifest, every check before anything changes, the values.

use std::fs;
use std::io::ErrorKind;
use std::ops::Range;
use std::path::{Path, PathBuf};

use parma_core::{Config, Key, Layout, Store};

use super::format::{self, Manifest, MANIFEST};
use super::stream::{default_buffer, Pass, Walk};
use super::CheckpointError;

/// The values a scan kept: keys in increasing order, each one's value at `offsets[i]`.
#[derive(Debug, Default)]
pub struct Values {
    /// The keys kept, increasing.
    pub keys: Vec<Key>,
    /// Where each key's value starts in `values` (one more entry: the end).
    pub offsets: Vec<usize>,
    /// The values, concatenated.
    pub values: Vec<f32>,
}

impl Values {
    /// The value of `keys[i]`.
    pub fn value(&self, i: usize) -> &[f32] {
        &self.values[self.offsets[i]..self.offsets[i + 1]]
    }

    /// The value of `key`, if the scan kept it.
    pub fn get(&self, key: Key) -> Option<&[f32]> {
        self.keys.binary_search(&key).ok().map(|i| self.value(i))
    }
}

/// A checkpoint directory whose manifest was read and checked on its own (the parts are
/// checked by [`Checkpoint::scan`]).
#[derive(Clone, Debug)]
pub struct Checkpoint {
    dir: PathBuf,
    manifest: Manifest,
    buffer: usize,
}

impl Checkpoint {
    /// Reads `dir`'s manifest and checks that it is one this parma reads and that it is
    /// consistent in itself. Reads no part.
    pub fn open(dir: &Path) -> Result<Checkpoint, CheckpointError> {
        let path = dir.join(MANIFEST);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(CheckpointError::NoManifest { dir: dir.to_path_buf() });
            }
            Err(e) => return Err(CheckpointError::io("read", &path, e)),
        };
        let manifest: Manifest = serde_json::from_str(&text)
            .map_err(|e| CheckpointError::BadManifest { path: path.clone(), reason: e.to_string() })?;
        let bad = |reason: String| Err(CheckpointError::BadManifest { path: path.clone(), reason });
        if manifest.format != format::FORMAT {
            return bad(format!("its format is `{}`, not `{}`", manifest.format, format::FORMAT));
        }
        if manifest.version != format::VERSION {
            return bad(format!("format version {}, this parma reads {}", manifest.version, format::VERSION));
        }
        if manifest.key_end == 0 {
            return bad("its key range is empty".into());
        }
        let expected =
            Layout::uniform(manifest.key_end, manifest.value_len.unwrap_or(1)).map(|l| l.digest()).ok();
        if manifest.value_len.is_some() && expected != Some(manifest.layout_digest) {
            return bad("its layout digest does not match its key range and value length".into());
        }
        let digest = format::model_digest_of(&manifest);
        if digest != Some(manifest.config_digest) {
            return bad("its configuration digest does not match its layout, init and seed".into());
        }
        for (i, p) in manifest.parts.iter().enumerate() {
            if p.file != format::part_name(p.node) || manifest.parts[..i].iter().any(|q| q.node == p.node) {
                return bad(format!(
                    "part {i} is `{}` of node {}: names and nodes must be distinct",
                    p.file, p.node
                ));
            }
        }
        let buffer = default_buffer(manifest.parts.len());
        Ok(Checkpoint { dir: dir.to_path_buf(), manifest, buffer })
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Checks that a cluster configured as `cfg` can load this checkpoint: the same layout
    /// (key range and value lengths), initial values and seed. Node count, technique and
    /// placement may differ.
    pub fn check_fits(&self, cfg: &Config) -> Result<(), CheckpointError> {
        let m = &self.manifest;
        let mismatch = |what: &'static str, checkpoint: String, cluster: String| {
            Err(CheckpointError::Mismatch { dir: self.dir.clone(), what, checkpoint, cluster })
        };
        let (l, ours) = (&cfg.layout, cfg.layout.uniform_len().map(|l| l as u32));
        if m.key_end != l.key_end() {
            return mismatch("key range", format!("0..{}", m.key_end), format!("0..{}", l.key_end()));
        }
        if m.value_len != ours || m.layout_digest != l.digest() {
            let show =
                |v: Option<u32>, max: usize| v.map_or(format!("per range, at most {max}"), |v| v.to_string());
            return mismatch(
                "value lengths",
                show(m.value_len, m.value_len_max as usize),
                show(ours, l.len_max()),
            );
        }
        let init = format::InitRecord::of(cfg.init);
        if m.init != init {
            return mismatch("initial values", format!("{:?}", m.init), format!("{init:?}"));
        }
        if m.seed != cfg.seed {
            return mismatch("seed", m.seed.to_string(), cfg.seed.to_string());
        }
        let ours = format::model_digest(l, cfg.init, cfg.seed);
        if m.config_digest != ours {
            return mismatch(
                "configuration digest",
                format!("{:016x}", m.config_digest),
                format!("{ours:016x}"),
            );
        }
        Ok(())
    }

    /// The bytes of the read buffer of each part (by default 1 MiB, less when the parts are
    /// many): what a scan or a restore holds of a part at a time besides one value.
    pub fn with_read_buffer(mut self, bytes: usize) -> Checkpoint {
        self.buffer = bytes.max(1);
        self
    }

    /// Reads and checks every part (size, SHA-256, header, every record, no key in two parts,
    /// every value length as `layout` says, or as the manifest says without one) and keeps
    /// the values of the keys `keep` selects. Changes nothing. The parts are streamed: its
    /// memory is a read buffer per part and the values kept.
    pub fn scan(
        &self,
        layout: Option<&Layout>,
        keep: impl Fn(Key) -> bool,
    ) -> Result<Values, CheckpointError> {
        let mut kept = Values::default();
        self.walk(layout, Pass::Check, |k, v| {
            if keep(k) {
                kept.keys.push(k);
                kept.offsets.push(kept.values.len());
                kept.values.extend_from_slice(v);
            }
            Ok(())
        })?;
        kept.offsets.push(kept.values.len());
        Ok(kept)
    }

    /// Streams every record of every part to `f` in increasing key order, checking the parts
    /// as `pass` says (see [`Pass`]).
    pub(crate) fn walk(
        &self,
        layout: Option<&Layout>,
        pass: Pass,
        f: impl FnMut(Key, &[f32]) -> Result<(), CheckpointError>,
    ) -> Result<(), CheckpointError> {
        let walk = Walk { dir: &self.dir, manifest: &self.manifest, layout, buffer: self.buffer };
        walk.run(pass, f)
    }

    /// The rows `keys` of the model as one `rows × len` table (keys never written have their
    /// initial value), after checking every part as [`Checkpoint::scan`] does. Every key of the
    /// range must have the same value length.
    pub fn table(&self, keys: Range<u64>) -> Result<(usize, Vec<f32>), CheckpointError> {
        let m = &self.manifest;
        let arg = |s: String| Err(CheckpointError::InvalidArgument(s));
        if keys.start >= keys.end {
            return arg(format!("the key range {}..{} is empty", keys.start, keys.end));
        }
        if keys.end > m.key_end {
            return arg(format!(
                "the key range {}..{} ends past the model's 0..{}",
                keys.start, keys.end, m.key_end
            ));
        }
        let rows = usize::try_from(keys.end - keys.start).unwrap_or(usize::MAX);
        let v = self.scan(None, |k| keys.contains(&k.0))?;
        let len = match (m.value_len, v.keys.first()) {
            (Some(l), _) => l as usize,
            (None, Some(_)) => v.value(0).len(),
            (None, None) => {
                return arg(
                    "no key of the range was written and the layout's lengths vary: its width is unknown"
                        .into(),
                )
            }
        };
        if let Some(i) = (0..v.keys.len()).find(|i| v.value(*i).len() != len) {
            return arg(format!(
                "key {} has {} values, key {} has {len}: not one table",
                v.keys[i].0,
                v.value(i).len(),
                v.keys[0].0
            ));
        }
        if rows.checked_mul(len).is_none_or(|n| n > 1 << 32) {
            return arg(format!("{rows} rows of {len} values are too many for one table"));
        }
        let mut table = vec![0.0f32; rows * len];
        let init = m.init.init();
        for (r, row) in table.chunks_exact_mut(len).enumerate() {
            let key = Key(keys.start + r as u64);
            match v.get(key) {
                Some(val) => row.copy_from_slice(val),
                None => row
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, x)| *x = Store::initial_value(init, m.seed, key, i)),
            }
        }
        Ok((len, table))
    }
}

//! The key space of a model and the value length of every key.

use alloc::vec::Vec;

use crate::error::ConfigError;
use crate::ids::Key;

/// Which keys exist (`0..key_end`) and how many `f32` each one's value has.
///
/// Keys are sparse in the sense that a node stores only those it holds; the layout only fixes
/// the range and the lengths. Lengths are uniform, or given per key range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    key_end: u64,
    lens: Lens,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Lens {
    Uniform(u32),
    /// Sorted by start key; the first range starts at key 0. Each entry is (first key, length).
    Ranges(Vec<(u64, u32)>),
}

/// The longest value a key may have, in `f32`s (64 MiB).
pub const VALUE_LEN_MAX: u32 = 1 << 24;

impl Layout {
    /// A 64-bit digest of the layout (its range and every value length), for checking that
    /// two nodes agree on it (see `Config::wire_cluster`).
    pub fn digest(&self) -> u64 {
        let fold = crate::ids::fold_digest;
        let acc = fold(0x6c61_796f_7574, self.key_end);
        match &self.lens {
            Lens::Uniform(len) => fold(acc, u64::from(*len)),
            Lens::Ranges(ranges) => ranges
                .iter()
                .fold(fold(acc, u64::MAX), |a, (first, len)| fold(fold(a, *first), u64::from(*len))),
        }
    }

    /// The layout as `(first key, length)` ranges in increasing order, the first at key 0,
    /// neighbours merged where their lengths are equal: one encoding per assignment of
    /// lengths to keys (a uniform layout is one range). What `Config::canonical_encoding`
    /// writes.
    pub fn canonical_ranges(&self) -> Vec<(u64, u32)> {
        match &self.lens {
            Lens::Uniform(len) => alloc::vec![(0, *len)],
            Lens::Ranges(ranges) => {
                let mut out: Vec<(u64, u32)> = Vec::with_capacity(ranges.len());
                for &(first, len) in ranges {
                    if out.last().is_none_or(|&(_, l)| l != len) {
                        out.push((first, len));
                    }
                }
                out
            }
        }
    }

    /// Keys `0..key_end`, every value `len` floats long.
    pub fn uniform(key_end: u64, len: u32) -> Result<Layout, ConfigError> {
        if key_end == 0 {
            return Err(ConfigError::EmptyKeySpace);
        }
        if len == 0 || len > VALUE_LEN_MAX {
            return Err(ConfigError::ValueLen { len });
        }
        Ok(Layout { key_end, lens: Lens::Uniform(len) })
    }

    /// Keys `0..key_end`; `ranges` gives `(first key, length)` pairs, the first starting at key 0,
    /// strictly increasing. A range lasts until the next one starts.
    pub fn ranges(key_end: u64, ranges: Vec<(u64, u32)>) -> Result<Layout, ConfigError> {
        if key_end == 0 {
            return Err(ConfigError::EmptyKeySpace);
        }
        match ranges.first() {
            Some((0, _)) => {}
            _ => return Err(ConfigError::RangesMustStartAtZero),
        }
        for w in ranges.windows(2) {
            if w[1].0 <= w[0].0 || w[1].0 >= key_end {
                return Err(ConfigError::RangesNotIncreasing);
            }
        }
        if let Some(&(_, len)) = ranges.iter().find(|(_, l)| *l == 0 || *l > VALUE_LEN_MAX) {
            return Err(ConfigError::ValueLen { len });
        }
        Ok(Layout { key_end, lens: Lens::Ranges(ranges) })
    }

    /// One past the largest key.
    pub fn key_end(&self) -> u64 {
        self.key_end
    }

    /// Whether `key` exists in this layout.
    #[inline]
    pub fn contains(&self, key: Key) -> bool {
        key.0 < self.key_end
    }

    /// The value length of `key`, or `None` if the key is outside the layout.
    #[inline]
    pub fn len_of(&self, key: Key) -> Option<usize> {
        if key.0 >= self.key_end {
            return None;
        }
        Some(match &self.lens {
            Lens::Uniform(l) => *l as usize,
            Lens::Ranges(r) => {
                let i = r.partition_point(|(start, _)| *start <= key.0);
                // `i >= 1` because the first range starts at key 0.
                r[i.saturating_sub(1)].1 as usize
            }
        })
    }

    /// The uniform value length, if all keys have the same.
    pub fn uniform_len(&self) -> Option<usize> {
        match &self.lens {
            Lens::Uniform(l) => Some(*l as usize),
            Lens::Ranges(_) => None,
        }
    }

    /// Total length of the values of `keys`, or the first key outside the layout.
    pub fn total_len(&self, keys: &[Key]) -> Result<usize, Key> {
        if let Some(l) = self.uniform_len() {
            if let Some(k) = keys.iter().find(|k| !self.contains(**k)) {
                return Err(*k);
            }
            return Ok(l * keys.len());
        }
        let mut total = 0usize;
        for &k in keys {
            total += self.len_of(k).ok_or(k)?;
        }
        Ok(total)
    }

    /// The longest value of any key.
    pub fn len_max(&self) -> usize {
        match &self.lens {
            Lens::Uniform(l) => *l as usize,
            Lens::Ranges(r) => r.iter().map(|(_, l)| *l as usize).max().unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn ranges_lookup() {
        let l = Layout::ranges(100, vec![(0, 4), (10, 8), (50, 1)]).unwrap();
        assert_eq!(l.len_of(Key(0)), Some(4));
        assert_eq!(l.len_of(Key(9)), Some(4));
        assert_eq!(l.len_of(Key(10)), Some(8));
        assert_eq!(l.len_of(Key(99)), Some(1));
        assert_eq!(l.len_of(Key(100)), None);
        assert_eq!(l.total_len(&[Key(0), Key(10), Key(60)]), Ok(13));
        assert_eq!(l.total_len(&[Key(0), Key(100)]), Err(Key(100)));
    }

    #[test]
    fn bad_layouts() {
        assert!(Layout::uniform(0, 4).is_err());
        assert!(Layout::uniform(10, 0).is_err());
        assert!(Layout::ranges(10, vec![(1, 4)]).is_err());
        assert!(Layout::ranges(10, vec![(0, 4), (0, 4)]).is_err());
        assert!(Layout::ranges(10, vec![(0, 4), (10, 4)]).is_err());
    }
}

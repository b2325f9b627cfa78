//! A running digest of a run's outputs, to compare two runs of one seed (in two processes:
//! see `tests/sim.rs` and `parma sim --determinism`).
//!
//! Its own mixing, not the core's: the code under test should not also be the judge.

use std::fmt;

/// A 64-bit digest of a sequence of words and byte strings, in order. Not cryptographic: it
/// only has to tell apart two runs that differ, which it does unless they collide by chance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Digest(u64);

impl Default for Digest {
    fn default() -> Digest {
        Digest(0x6a09_e667_f3bc_c908)
    }
}

impl Digest {
    /// Folds in one word.
    pub fn word(&mut self, x: u64) {
        let h = (self.0 ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = (h ^ (h >> 29)).rotate_left(23);
    }

    /// Folds in a byte string and its length.
    pub fn bytes(&mut self, b: &[u8]) {
        self.word(b.len() as u64);
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            self.word(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.word(u64::from_le_bytes(last));
        }
    }

    /// The digest so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

/// `write!` into a digest folds in the formatted text, without allocating.
impl fmt::Write for Digest {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.bytes(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(parts: &[&[u8]]) -> u64 {
        let mut d = Digest::default();
        parts.iter().for_each(|p| d.bytes(p));
        d.finish()
    }

    #[test]
    fn order_length_and_content_count() {
        let base = of(&[b"abc", b"defghijkl"]);
        assert_eq!(base, of(&[b"abc", b"defghijkl"]));
        assert_ne!(base, of(&[b"defghijkl", b"abc"]), "order");
        assert_ne!(base, of(&[b"abcd", b"efghijkl"]), "where one part ends");
        assert_ne!(base, of(&[b"abc", b"defghijkm"]), "a byte in the remainder");
        assert_ne!(base, of(&[b"abc", b"defghijk\0l"]), "a zero byte");
        let mut a = Digest::default();
        a.word(1);
        a.word(2);
        let mut b = Digest::default();
        b.word(2);
        b.word(1);
        assert_ne!(a.finish(), b.finish());
    }
}

//! A node's pool stream of one distribution (NuPS's sample reuse, nups-sigmod22.txt §4.4):
//! `G` iid draws traversed `U` times, each time in a fresh random order, then the next pool.
//! Shared by the node's workers, as NuPS's one background thread per node shares its pools.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use super::rng::SampleRng;
use super::Distribution;
use crate::ids::Key;

/// The pool stream state.
#[derive(Debug)]
pub(super) struct Pool {
    keys: Vec<Key>,
    order: Vec<u32>,
    pos: usize,
    pass: u32,
    /// Without replacement: stream keys a handle already had, kept for the next handles.
    pub(super) carry: VecDeque<Key>,
    rng: SampleRng,
}

impl Pool {
    /// An empty stream; the first key draws the first pool.
    pub(super) fn new(rng: SampleRng) -> Pool {
        Pool { keys: Vec::new(), order: Vec::new(), pos: 0, pass: 0, carry: VecDeque::new(), rng }
    }

    /// The next key of the stream, and whether a new pool was drawn for it.
    pub(super) fn next(&mut self, dist: &Distribution, g: u32, u: u32) -> (Key, bool) {
        let mut drawn = false;
        if self.pos == self.order.len() {
            self.pos = 0;
            self.pass += 1;
            if self.keys.is_empty() || self.pass >= u {
                self.keys.clear();
                self.keys.extend((0..g).map(|_| dist.draw(&mut self.rng).0));
                self.order = (0..g).collect();
                self.pass = 0;
                drawn = true;
            }
            self.rng.shuffle(&mut self.order);
        }
        let k = self.keys[self.order[self.pos] as usize];
        self.pos += 1;
        (k, drawn)
    }
}

//! Requests this node issued for its workers, until every key is answered.

use alloc::vec::Vec;
use core::hash::BuildHasherDefault;

use hashbrown::HashMap;

use crate::ids::{Key, MixHasher, RequestId, Ticket, WorkerId};
use crate::layout::Layout;
use crate::time::Instant;

/// The requests a node waits on, by id. Hashed with [`crate::ids::mix`] and no random seed,
/// like the key maps: a walk over it (the invariant checks) is the same in every run. Where
/// the order reaches an output (requests failed at once), the ids are sorted first.
pub(crate) type PendingMap = HashMap<RequestId, Pending, BuildHasherDefault<MixHasher>>;

#[derive(Debug)]
pub(crate) enum PendingKind {
    /// Values of `keys` land at `offs[i]..offs[i+1]` of `values`.
    Pull {
        values: Vec<f32>,
        offs: Vec<usize>,
    },
    Write,
    Localize,
    /// A localize the sampling manager issued for prepared samples (under relocation); no
    /// worker waits for it, so it completes without an event.
    Prefetch,
}

/// One worker operation that needs other nodes.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) worker: WorkerId,
    pub(crate) ticket: Ticket,
    pub(crate) kind: PendingKind,
    pub(crate) keys: Vec<Key>,
    index: HashMap<Key, u32>,
    done: Vec<bool>,
    pub(crate) remaining: usize,
    pub(crate) deadline: Instant,
    /// The worker's clock when the request was issued (for the clock gates).
    pub(crate) clock: u64,
}

impl Pending {
    pub(crate) fn new(
        worker: WorkerId,
        ticket: Ticket,
        kind: PendingKind,
        keys: Vec<Key>,
        deadline: Instant,
    ) -> Pending {
        let index = keys.iter().enumerate().map(|(i, k)| (*k, i as u32)).collect();
        let n = keys.len();
        Pending {
            worker,
            ticket,
            kind,
            keys,
            index,
            done: alloc::vec![false; n],
            remaining: n,
            deadline,
            clock: 0,
        }
    }

    pub(crate) fn pull(
        worker: WorkerId,
        ticket: Ticket,
        keys: Vec<Key>,
        layout: &Layout,
        deadline: Instant,
    ) -> Pending {
        let mut offs = Vec::with_capacity(keys.len() + 1);
        let mut at = 0usize;
        offs.push(0);
        for k in &keys {
            at += layout.len_of(*k).unwrap_or(0);
            offs.push(at);
        }
        let values = alloc::vec![0.0; at];
        Pending::new(worker, ticket, PendingKind::Pull { values, offs }, keys, deadline)
    }

    /// Marks `key` answered, copying `values` for a pull. Returns false if the key is not part of
    /// this request or was answered already (a duplicate reply: a protocol error).
    pub(crate) fn answer(&mut self, key: Key, values: &[f32]) -> bool {
        let Some(&i) = self.index.get(&key) else { return false };
        let i = i as usize;
        if self.done[i] {
            return false;
        }
        if let PendingKind::Pull { values: dst, offs } = &mut self.kind {
            let Some(d) = dst.get_mut(offs[i]..offs[i + 1]) else { return false };
            if d.len() != values.len() {
                return false;
            }
            d.copy_from_slice(values);
        }
        self.done[i] = true;
        self.remaining -= 1;
        true
    }

    pub(crate) fn contains(&self, key: Key) -> bool {
        self.index.contains_key(&key)
    }

    pub(crate) fn unanswered(&self) -> usize {
        self.done.iter().filter(|d| !**d).count()
    }
}

//! The distributions a node registered, shared (like the store) between the node and its
//! workers' samplers. Append-only.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, Ordering};

use super::pool::Pool;
use super::rng::SampleRng;
use super::{Conformity, Distribution, SampleError, SamplingOptions};
use crate::ids::{DistId, NodeId};
use crate::layout::Layout;

/// One registered distribution.
#[derive(Debug)]
pub struct Registered {
    /// The target distribution π.
    pub dist: Distribution,
    /// The level its samples must meet.
    pub conformity: Conformity,
    /// A hash of the distribution, the level and the options; equal on nodes that agree.
    pub fingerprint: u64,
    /// 0, or 1 + the first node found to disagree.
    mismatch: AtomicU32,
    /// The node's pool stream (pool reuse schemes), shared by its workers.
    pub(super) pool: spin::Mutex<Pool>,
}

impl Registered {
    /// The first node found to have registered something else under this id.
    pub fn mismatch(&self) -> Option<NodeId> {
        match self.mismatch.load(Ordering::Acquire) {
            0 => None,
            n => Some(NodeId((n - 1) as u16)),
        }
    }
}

/// The distributions of one node, numbered in registration order.
#[derive(Debug)]
pub struct Registry {
    entries: spin::Mutex<Vec<Arc<Registered>>>,
    opts: SamplingOptions,
    layout: Layout,
    /// Seeds each distribution's pool stream.
    seeder: spin::Mutex<SampleRng>,
}

impl Registry {
    /// An empty registry for keys of `layout`; `seeder` seeds the pool streams.
    pub fn new(opts: SamplingOptions, layout: Layout, seeder: SampleRng) -> Registry {
        Registry { entries: spin::Mutex::new(Vec::new()), opts, layout, seeder: spin::Mutex::new(seeder) }
    }

    /// The options every sampler of this node uses.
    pub fn options(&self) -> SamplingOptions {
        self.opts
    }

    /// Registers `dist` under `conformity`; ids count from 0 in registration order.
    pub fn register(&self, dist: Distribution, conformity: Conformity) -> Result<DistId, SampleError> {
        if !dist.fits(&self.layout) {
            return Err(SampleError::BadDistribution);
        }
        let o = &self.opts;
        let fingerprint =
            [conformity as u64, u64::from(o.pool_size), u64::from(o.reuse), o.with_replacement as u64]
                .into_iter()
                .fold(dist.fingerprint(), crate::ids::fold_digest);
        let mut e = self.entries.lock();
        if e.len() >= self.opts.distributions_max {
            return Err(SampleError::TooManyDistributions);
        }
        let pool = spin::Mutex::new(Pool::new(self.seeder.lock().fork()));
        e.push(Arc::new(Registered { dist, conformity, fingerprint, mismatch: AtomicU32::new(0), pool }));
        Ok(DistId((e.len() - 1) as u32))
    }

    /// Distribution `id`.
    pub fn get(&self, id: DistId) -> Result<Arc<Registered>, SampleError> {
        self.entries.lock().get(id.0 as usize).cloned().ok_or(SampleError::UnknownDistribution { dist: id })
    }

    /// Distributions registered.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// Whether none is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Compares `fingerprint`, which `node` registered as `id`, with this node's; records the
    /// first disagreement. `None` if this node has no distribution `id` yet.
    pub fn check(&self, id: DistId, fingerprint: u64, node: NodeId) -> Option<bool> {
        let r = self.get(id).ok()?;
        let same = r.fingerprint == fingerprint;
        if !same {
            let _ =
                r.mismatch.compare_exchange(0, u32::from(node.0) + 1, Ordering::AcqRel, Ordering::Acquire);
        }
        Some(same)
    }
}

//! The worker's sampling calls (nups-sigmod22.txt §4.3). The scheme, the draws and the
//! decisions are the core's [`parma_core::Sampler`]; this file only carries them out: intents
//! go to the node like any intent, values of local keys are copied by the worker thread
//! itself, and only keys that are not local become a pull command for the node.

use parma_core::sampling::SamplingStats;
use parma_core::{AccessKind, Clock, Conformity, DistId, Distribution, Key, Layout, OpError, SampleHandle};

use super::{KeyMap, Worker};
use crate::driver::Command;

impl Worker {
    /// Registers `dist` under `conformity` for this worker's node and returns its id, usable
    /// by every worker of the node. Every node must register the same distributions in the
    /// same order (register them from one worker per node, before sampling); the node tells
    /// its peers, and a peer that registered something else under the same id is reported:
    /// preparing samples of it fails with `SampleError::DistributionMismatch` once the nodes
    /// have heard of each other (a barrier after registering makes sure they have).
    pub fn register_distribution(
        &mut self,
        dist: Distribution,
        conformity: Conformity,
    ) -> Result<DistId, OpError> {
        self.check_open()?;
        let id = self.sampler.registry().register(dist, conformity)?;
        self.send(Command::AnnounceDistributions)?;
        self.shared.nudge_driver();
        Ok(id)
    }

    /// Prepares `n` samples of `dist` that this worker will use while its clock is in
    /// `[start, end)`. Returns at once: the node makes the drawn keys local in time (they
    /// become this worker's intent for that window; under relocation, the node localizes
    /// them).
    pub fn prepare_sample(
        &mut self,
        dist: DistId,
        n: u64,
        start: Clock,
        end: Clock,
    ) -> Result<SampleHandle, OpError> {
        self.check_open()?;
        super::check_window(start, end)?;
        let (handle, keys) = self.sampler.prepare(dist, n)?;
        if !keys.is_empty() {
            if let Err(e) = self.send(Command::SampleIntent { worker: self.id, keys, start, end }) {
                let _ = self.sampler.finish(handle);
                return Err(e);
            }
            // Under relocation the node starts moving the keys at once; else they are an
            // intent like any other, which waits for the next sync round.
            if self.shared.cfg.technique.uses_localize() {
                self.shared.nudge_driver();
            } else {
                self.nudge_lazily();
            }
        }
        Ok(handle)
    }

    /// Fills `keys` with the next `keys.len()` samples of `handle` and `values` with their
    /// values (concatenated), remotely where needed. May be called until all `n` samples of
    /// the handle are used. A refused call (unknown handle, more samples than are left, a
    /// value buffer of the wrong length) changes nothing. Once the samples are drawn, an
    /// error of the pull itself (`Closed`, `Timeout`, `PeerFailed`) leaves them used.
    pub fn pull_sample(
        &mut self,
        handle: SampleHandle,
        keys: &mut [Key],
        values: &mut [f32],
    ) -> Result<(), OpError> {
        self.check_open()?;
        let store = &self.shared.store;
        let layout = &self.shared.cfg.layout;
        // A key the sampler finds local is read in the same step (one latch): a local sample
        // (NON-CONFORM) must not go remote because its key moved away between the choice and
        // the pull. Each distinct key is read once per call: `read` maps it to its value's
        // offset in `scratch`, and a key read already counts as local (its value is in hand).
        // Both are the worker's scratch buffers, kept across calls.
        let mut scratch = std::mem::take(&mut self.sample_values);
        let mut read = std::mem::take(&mut self.remote_index);
        scratch.clear();
        read.clear();
        let drawn = self.sampler.pull(handle, keys, values.len(), layout, |k| {
            if read.contains_key(&k) {
                return true;
            }
            let Some(len) = layout.len_of(k) else { return false };
            let at = scratch.len();
            scratch.resize(at + len, 0.0);
            if store.read(k, &mut scratch[at..]) {
                read.insert(k, at);
                return true;
            }
            scratch.truncate(at);
            false
        });
        // Serve from the reads if every key was read and this worker has no write in flight
        // to any of them (a pull would wait for it: read-your-writes); else pull as usual.
        let served = drawn.is_ok()
            && !self.access.conflicts(keys, AccessKind::Pull)
            && serve_from_reads(layout, keys, values, &read, &scratch);
        read.clear();
        self.sample_values = scratch;
        self.remote_index = read;
        drawn?;
        if served {
            self.stats.keys_pulled_local += keys.len() as u64;
            self.publish();
            return Ok(());
        }
        self.pull(keys, values)
    }

    /// Ends `handle`; samples not pulled are dropped.
    pub fn finish_sample(&mut self, handle: SampleHandle) -> Result<(), OpError> {
        Ok(self.sampler.finish(handle)?)
    }

    /// This worker's sampling counters.
    pub fn sampling_stats(&self) -> SamplingStats {
        self.sampler.stats()
    }
}

/// Copies the value read for every key of `keys` into `values`; false (with `values` partly
/// written, to be overwritten by a pull) if a key was not read.
fn serve_from_reads(
    layout: &Layout,
    keys: &[Key],
    values: &mut [f32],
    read: &KeyMap<usize>,
    scratch: &[f32],
) -> bool {
    let mut off = 0;
    for k in keys {
        let (Some(&at), Some(len)) = (read.get(k), layout.len_of(*k)) else { return false };
        let (Some(dst), Some(src)) = (values.get_mut(off..off + len), scratch.get(at..at + len)) else {
            return false;
        };
        dst.copy_from_slice(src);
        off += len;
    }
    off == values.len()
}

//! The cluster-wide barrier: workers enter at their node; the node enters at the coordinator
//! (node 0) once all its workers have; the coordinator releases everyone once all nodes have.

use alloc::vec;
use alloc::vec::Vec;

use crate::error::OpError;
use crate::ids::{NodeId, Ticket, WorkerId};

/// The node that counts barrier entries.
pub(crate) const COORDINATOR: NodeId = NodeId(0);

pub(crate) struct Barrier {
    workers: u16,
    /// The generation this node's workers are in.
    generation: u64,
    waiting: Vec<(WorkerId, Ticket)>,
    /// Coordinator only: the generation being counted and which nodes entered it.
    coord_generation: u64,
    entered: Vec<bool>,
}

impl Barrier {
    /// Slots of the per-node entries of the coordinator's count (allocated on every node).
    pub(crate) fn peer_slots(&self) -> usize {
        self.entered.len()
    }

    pub(crate) fn new(nodes: u16, workers: u16) -> Barrier {
        Barrier {
            workers,
            generation: 0,
            waiting: Vec::new(),
            coord_generation: 0,
            entered: vec![false; usize::from(nodes)],
        }
    }

    /// A worker enters; returns the generation to announce to the coordinator when it was the
    /// node's last worker.
    pub(crate) fn enter(&mut self, worker: WorkerId, ticket: Ticket) -> Result<Option<u64>, OpError> {
        if self.waiting.iter().any(|(w, _)| *w == worker) {
            return Err(OpError::InvalidArgument);
        }
        self.waiting.push((worker, ticket));
        Ok((self.waiting.len() == usize::from(self.workers)).then_some(self.generation))
    }

    /// Whether the coordinator would count `from` entering `generation` (for error counting).
    pub(crate) fn accepts(&self, from: NodeId, generation: u64) -> bool {
        generation == self.coord_generation && !self.entered.get(from.index()).copied().unwrap_or(true)
    }

    /// Coordinator: `from` entered; returns the generation to release when it was the last.
    pub(crate) fn coordinator_enter(&mut self, from: NodeId, generation: u64) -> Option<u64> {
        if !self.accepts(from, generation) {
            return None;
        }
        self.entered[from.index()] = true;
        if self.entered.iter().all(|e| *e) {
            self.entered.iter_mut().for_each(|e| *e = false);
            self.coord_generation += 1;
            return Some(generation);
        }
        None
    }

    /// The coordinator released `generation`: every waiting worker passes.
    pub(crate) fn release(&mut self, generation: u64) -> Vec<(WorkerId, Ticket)> {
        if generation != self.generation || self.waiting.len() != usize::from(self.workers) {
            return Vec::new();
        }
        self.generation += 1;
        core::mem::take(&mut self.waiting)
    }

    pub(crate) fn fail_all(&mut self) -> Vec<(WorkerId, Ticket)> {
        core::mem::take(&mut self.waiting)
    }

    pub(crate) fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

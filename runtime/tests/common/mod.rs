//! A cluster of runtimes on the threaded loopback transport, for the integration tests.
#![allow(dead_code)]

use parma_core::{Config, Key, NodeId};
use parma_runtime::{NodeRuntime, Options, Stats, Worker};
use parma_transport_loopback::threaded::{cluster, ThreadedController, ThreadedOptions};

pub struct Cluster {
    pub nodes: Vec<NodeRuntime>,
    /// Every worker of every node, node by node.
    pub workers: Vec<Worker>,
    pub controller: ThreadedController,
}

pub fn start(cfg: &Config, opts: Options, topts: ThreadedOptions) -> Cluster {
    let transports = cluster(cfg.nodes, topts);
    let controller = transports[0].controller();
    let (mut nodes, mut workers) = (Vec::new(), Vec::new());
    for (i, t) in transports.into_iter().enumerate() {
        let (node, ws) = NodeRuntime::start_with(cfg.clone(), NodeId(i as u16), t, opts.clone()).unwrap();
        nodes.push(node);
        workers.extend(ws);
    }
    Cluster { nodes, workers, controller }
}

/// Runs `f` on every worker, each in its own thread, and gives the workers back with the
/// results, in the same order.
pub fn run_all<R: Send>(
    workers: Vec<Worker>,
    f: impl Fn(usize, &mut Worker) -> R + Sync,
) -> Vec<(Worker, R)> {
    std::thread::scope(|s| {
        let handles: Vec<_> = workers
            .into_iter()
            .enumerate()
            .map(|(i, mut w)| {
                let f = &f;
                s.spawn(move || {
                    let r = f(i, &mut w);
                    (w, r)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Finalizes every worker (each in its own thread: finalize ends with a barrier).
pub fn finalize_all(workers: Vec<Worker>) {
    std::thread::scope(|s| {
        let handles: Vec<_> = workers.into_iter().map(|w| s.spawn(move || w.finalize())).collect();
        for h in handles {
            h.join().unwrap().unwrap();
        }
    });
}

pub fn shutdown_all(nodes: Vec<NodeRuntime>) -> Vec<Stats> {
    nodes.into_iter().map(|n| n.shutdown().unwrap()).collect()
}

/// A key from `from` on whose home is `node` in the cluster `cfg` describes.
pub fn key_homed_at(node: NodeId, cfg: &Config, from: u64) -> Key {
    let homes = parma_core::placement::Homes::new(cfg.placement, cfg.nodes, cfg.layout.key_end());
    (from..cfg.layout.key_end()).map(Key).find(|k| homes.home(*k) == node).unwrap()
}

/// splitmix64: a small seeded generator.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

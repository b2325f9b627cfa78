//! An in-process cluster: every node in this process, on the threaded in-memory transport.

use std::panic::{catch_unwind, AssertUnwindSafe};

use parma_core::{Config, NodeId};
use parma_runtime::{NodeRuntime, Options, Stats, Worker};
use parma_transport_loopback::threaded::{cluster, ThreadedOptions};

use crate::Error;

/// `cfg.nodes` nodes in this process, each with `cfg.workers_per_node` workers, talking over
/// the threaded in-memory transport: what one machine runs, and what tests use.
///
/// [`LocalCluster::run`] runs a closure on every worker, each on its own thread, and
/// finalizes them; [`LocalCluster::take_workers`] hands the workers out instead, for threads
/// of your own. [`LocalCluster::shutdown`] stops every node and returns its statistics.
#[derive(Debug)]
pub struct LocalCluster {
    nodes: Vec<NodeRuntime>,
    workers: Vec<Worker>,
}

impl LocalCluster {
    /// Starts the cluster `cfg` describes with the runtime's default options.
    pub fn start(cfg: Config) -> Result<LocalCluster, Error> {
        LocalCluster::start_with(cfg, Options::default())
    }

    /// Starts the cluster `cfg` describes, every node's runtime with `opts`. The
    /// configuration is checked first: an invalid one starts no node.
    pub fn start_with(cfg: Config, opts: Options) -> Result<LocalCluster, Error> {
        cfg.validate(NodeId(0))?;
        let (mut nodes, mut workers) = (Vec::new(), Vec::new());
        for (i, transport) in cluster(cfg.nodes, ThreadedOptions::default()).into_iter().enumerate() {
            // A node that fails to start leaves the ones started before it to be dropped,
            // which stops them.
            let (node, handles) =
                NodeRuntime::start_with(cfg.clone(), NodeId(i as u16), transport, opts.clone())?;
            nodes.push(node);
            workers.extend(handles);
        }
        Ok(LocalCluster { nodes, workers })
    }

    /// The nodes' runtimes, node 0 first.
    pub fn nodes(&self) -> &[NodeRuntime] {
        &self.nodes
    }

    /// Takes every worker not taken yet, node by node (node 0's workers first). Finalize each
    /// ([`Worker::finalize`], on its own thread: it ends with a cluster-wide barrier) before
    /// [`LocalCluster::shutdown`].
    pub fn take_workers(&mut self) -> Vec<Worker> {
        std::mem::take(&mut self.workers)
    }

    /// Runs `f` on every worker not taken yet, each on its own thread, then finalizes them,
    /// and returns the results in worker order (node 0's workers first). If one worker fails
    /// (or panics), every node is aborted so that the others' waits end at once, and the
    /// first failure is returned; the cluster can then only be shut down.
    pub fn run<R, E>(&mut self, f: impl Fn(&mut Worker) -> Result<R, E> + Sync) -> Result<Vec<R>, Error>
    where
        R: Send,
        E: Into<Error> + Send,
    {
        let workers = self.take_workers();
        let nodes = &self.nodes;
        let results: Vec<Result<R, Error>> = std::thread::scope(|s| {
            let handles: Vec<_> = workers
                .into_iter()
                .map(|mut w| {
                    let f = &f;
                    s.spawn(move || {
                        let (node, worker) = (w.node(), w.id().0);
                        let r = match catch_unwind(AssertUnwindSafe(|| f(&mut w))) {
                            Ok(Ok(r)) => w.finalize().map(|()| r).map_err(Error::from),
                            Ok(Err(e)) => Err(e.into()),
                            Err(_) => Err(Error::WorkerPanicked { node, worker }),
                        };
                        if r.is_err() {
                            nodes.iter().for_each(NodeRuntime::abort);
                        }
                        r
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(Err(Error::Options("a worker thread died".into()))))
                .collect()
        });
        // The first failure that is not only the echo of another's abort.
        if let Some(i) = results.iter().position(|r| matches!(r, Err(e) if !is_abort(e))) {
            return Err(results.into_iter().nth(i).and_then(Result::err).expect("an error at i"));
        }
        results.into_iter().collect()
    }

    /// The nodes' runtimes, for a caller that stops them itself ([`NodeRuntime::shutdown`],
    /// after finalizing every worker); workers not taken yet are dropped.
    pub fn into_nodes(self) -> Vec<NodeRuntime> {
        self.nodes
    }

    /// Stops every node (waiting for each to drain) and returns their statistics, node 0
    /// first. Finalize every worker taken before.
    pub fn shutdown(self) -> Result<Vec<Stats>, Error> {
        self.nodes.into_iter().map(|n| n.shutdown().map_err(Error::from)).collect()
    }
}

fn is_abort(e: &Error) -> bool {
    matches!(e, Error::Op(parma_core::OpError::Aborted))
}

//! `parma.LocalCluster`, `parma.Node` and `parma.start_node`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use parma::node::{NodeOptions, NodeTransport};
use parma::startup::{ClusterToken, Launch};
use parma::{LocalCluster, NodeId, NodeRuntime, Options};
use pyo3::prelude::*;
use pyo3::types::{PyAny, PyDict, PyList};

use crate::config::PyConfig;
use crate::errors::{self, value_error};
use crate::worker::{wrap_workers, Cell, PyWorker};

/// Nodes and their Python workers, shut down once.
struct Nodes {
    runtimes: Mutex<Option<Vec<NodeRuntime>>>,
    cells: Vec<Arc<Cell>>,
    workers: Vec<Py<PyWorker>>,
}

impl Nodes {
    fn workers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.workers.iter().map(|w| w.clone_ref(py)))
    }

    fn abort(&self) {
        if let Some(rs) = self.runtimes.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            rs.iter().for_each(NodeRuntime::abort);
        }
    }

    /// Finalizes every worker not finalized yet (each on its own thread: finalize is
    /// collective), then stops the nodes; returns their counters. The first error wins; the
    /// nodes are stopped whatever happened.
    fn shutdown<'py>(&self, py: Python<'py>, finalize: bool) -> PyResult<Bound<'py, PyList>> {
        let Some(runtimes) = self.runtimes.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return Err(errors::parma_error("ClosedError", "the cluster was shut down already".into()));
        };
        let cells = &self.cells;
        let (stats, first_err) = py.detach(|| {
            let mut first: Option<PyErr> = None;
            if !finalize {
                runtimes.iter().for_each(NodeRuntime::abort);
            }
            let results: Vec<Result<(), parma::OpError>> = std::thread::scope(|s| {
                let hs: Vec<_> = cells
                    .iter()
                    .filter_map(|c| c.take())
                    .map(|w| {
                        let rs = &runtimes;
                        s.spawn(move || {
                            let r = w.and_then(|w| if finalize { w.finalize() } else { Ok(()) });
                            if r.is_err() {
                                rs.iter().for_each(NodeRuntime::abort);
                            }
                            r
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap_or(Err(parma::OpError::Aborted))).collect()
            });
            // The first failure that is not the echo of another's abort.
            let mut errs: Vec<parma::OpError> = results.into_iter().filter_map(Result::err).collect();
            errs.sort_by_key(|e| matches!(e, parma::OpError::Aborted | parma::OpError::Closed));
            if let Some(e) = errs.into_iter().next() {
                if finalize {
                    first = Some(errors::op(e));
                }
            }
            let mut stats = Vec::new();
            for r in runtimes {
                match r.shutdown() {
                    Ok(s) => stats.push(s),
                    Err(e) => {
                        if first.is_none() && finalize {
                            first = Some(errors::runtime(e));
                        }
                    }
                }
            }
            (stats, first)
        });
        if let Some(e) = first_err {
            return Err(e);
        }
        let out = PyList::empty(py);
        for s in &stats {
            out.append(crate::stats::node(py, s)?)?;
        }
        Ok(out)
    }

    /// Leaving a `with` block: shuts down (after an exception, aborting first so that no
    /// wait hangs, and letting that exception through). Never swallows the exception.
    fn exit(&self, py: Python<'_>, exc_type: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let clean = exc_type.is_none_or(|t| t.is_none());
        if self.runtimes.lock().unwrap_or_else(|p| p.into_inner()).is_none() {
            return Ok(false);
        }
        let r = self.shutdown(py, clean);
        if clean {
            r?;
        }
        Ok(false)
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let g = self.runtimes.lock().unwrap_or_else(|p| p.into_inner());
        let rs = g
            .as_ref()
            .ok_or_else(|| errors::parma_error("ClosedError", "the cluster was shut down".into()))?;
        let out = PyList::empty(py);
        for r in rs {
            out.append(crate::stats::node(py, &r.stats())?)?;
        }
        Ok(out)
    }
}

/// An in-process cluster: `config.nodes` nodes in this process, each with
/// `config.workers_per_node` workers, on the threaded in-memory transport.
///
/// `workers()` gives the workers (node 0's first), one per training thread. `shutdown()`
/// finalizes the workers not finalized yet and stops the nodes. As a context manager, leaving
/// the block shuts it down (after an exception: aborts it, so that no wait hangs).
#[pyclass(module = "parma._parma", name = "LocalCluster", frozen)]
pub struct PyLocalCluster {
    nodes: Nodes,
}

#[pymethods]
impl PyLocalCluster {
    #[new]
    fn new(py: Python<'_>, config: &PyConfig) -> PyResult<PyLocalCluster> {
        let cfg = config.inner.clone();
        let mut cluster = py.detach(|| LocalCluster::start(cfg.clone())).map_err(errors::facade)?;
        let mut workers = cluster.take_workers();
        let per = usize::from(cfg.workers_per_node);
        let (mut cells, mut objs) = (Vec::new(), Vec::new());
        // Each node's workers share its table of distributions.
        while !workers.is_empty() {
            let rest = workers.split_off(per.min(workers.len()));
            let (c, o) = wrap_workers(py, std::mem::replace(&mut workers, rest), &cfg)?;
            cells.extend(c);
            objs.extend(o);
        }
        let runtimes = cluster.into_nodes();
        Ok(PyLocalCluster { nodes: Nodes { runtimes: Mutex::new(Some(runtimes)), cells, workers: objs } })
    }

    /// The workers, node 0's first: `workers_per_node` per node.
    fn workers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.nodes.workers(py)
    }

    /// Every node's counters (a list of dicts, node 0 first), now.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.nodes.stats(py)
    }

    /// Aborts every node: every wait of every worker ends at once with `ClosedError`.
    fn abort(&self) {
        self.nodes.abort();
    }

    /// shutdown() -> list[dict]
    ///
    /// Finalizes every worker not finalized yet (concurrently: finalize is collective), stops
    /// every node and returns their counters. GIL released while it waits.
    fn shutdown<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.nodes.shutdown(py, true)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.nodes.exit(py, exc_type)
    }
}

/// This process as one node of a multi-process cluster (`start_node`).
#[pyclass(module = "parma._parma", name = "Node", frozen)]
pub struct PyNode {
    nodes: Nodes,
    rank: u16,
    world: u16,
}

#[pymethods]
impl PyNode {
    /// This node's rank (its node id).
    #[getter]
    fn rank(&self) -> u16 {
        self.rank
    }

    /// The number of nodes.
    #[getter]
    fn world(&self) -> u16 {
        self.world
    }

    /// This node's workers, one per training thread.
    fn workers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.nodes.workers(py)
    }

    /// This node's counters (a dict).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        Ok(self.nodes.stats(py)?.get_item(0)?.cast_into::<PyDict>()?)
    }

    /// The ranks of the peers this node found failed.
    fn failed_peers(&self) -> Vec<u16> {
        let g = self.nodes.runtimes.lock().unwrap_or_else(|p| p.into_inner());
        g.as_ref()
            .map(|rs| rs.iter().flat_map(|r| r.failed_peers()).map(|n| n.0).collect())
            .unwrap_or_default()
    }

    /// Aborts this node: every wait of its workers ends at once with `ClosedError`.
    fn abort(&self) {
        self.nodes.abort();
    }

    /// shutdown() -> dict
    ///
    /// Finalizes this node's workers not finalized yet (collective with every other node),
    /// stops the node and returns its counters.
    fn shutdown<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        Ok(self.nodes.shutdown(py, true)?.get_item(0)?.cast_into::<PyDict>()?)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.nodes.exit(py, exc_type)
    }

    fn __repr__(&self) -> String {
        format!("<parma.Node rank {} of {}>", self.rank, self.world)
    }
}

/// start_node(config, *, transport="zmq", bind=None, advertise=None, peer_timeout=5.0,
/// startup_timeout=60.0, job_digest=0, rank=None, world=None, rendezvous=None, token=None)
/// -> Node | None
///
/// Starts this process as one node of a multi-process cluster: reads the launcher's
/// environment (torchrun, Slurm, Open MPI, MPICH, `parma launch`, ps-lite's variables) and
/// the cluster token (`PARMA_TOKEN_FILE` or `PARMA_TOKEN`), meets the other nodes at rank 0's
/// rendezvous (under torchrun at `MASTER_PORT`+1: torch keeps `MASTER_PORT`) and connects to
/// them. `rank`, `world` and `rendezvous` ("host:port") given together replace the
/// environment; `token` (str or bytes) replaces the token's variables. Every node passes the
/// same configuration and `job_digest`; a node that differs is refused (`RefusedError`).
/// Returns None when this process is no node (a ps-lite worker). Waits with the GIL
/// released; at most `startup_timeout` seconds (`StartupTimeoutError`).
#[pyfunction]
#[pyo3(signature = (config, *, transport="zmq", bind=None, advertise=None, peer_timeout=5.0,
    startup_timeout=60.0, job_digest=0, rank=None, world=None, rendezvous=None, token=None))]
#[allow(clippy::too_many_arguments)]
pub fn start_node(
    py: Python<'_>,
    config: &PyConfig,
    transport: &str,
    bind: Option<String>,
    advertise: Option<String>,
    peer_timeout: f64,
    startup_timeout: f64,
    job_digest: u64,
    rank: Option<u16>,
    world: Option<u16>,
    rendezvous: Option<String>,
    token: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<PyNode>> {
    let seconds = |name: &str, s: f64| {
        if s.is_finite() && s > 0.0 && s < 1e7 {
            Ok(Duration::from_secs_f64(s))
        } else {
            Err(value_error(format!("{name} must be a positive number of seconds, not {s}")))
        }
    };
    let mut opts = NodeOptions::default();
    opts.transport = NodeTransport::from_name(transport).map_err(errors::facade)?;
    opts.bind = bind;
    opts.advertise = advertise;
    opts.peer_timeout = seconds("peer_timeout", peer_timeout)?;
    opts.startup_timeout = seconds("startup_timeout", startup_timeout)?;
    opts.job_digest = job_digest;
    if let Some(t) = token {
        let secret: Vec<u8> = match t.extract::<String>() {
            Ok(s) => s.into_bytes(),
            Err(_) => t.extract::<Vec<u8>>().map_err(|_| errors::type_error("token must be str or bytes"))?,
        };
        opts.token = Some(ClusterToken::from_secret(secret).map_err(|e| value_error(e.to_string()))?);
    }
    let launch = match (rank, world, rendezvous) {
        (None, None, None) => Launch::from_process_env().map_err(|e| errors::startup(&e))?,
        (Some(r), Some(w), Some(rv)) => {
            Launch::explicit(NodeId(r), w, &rv).map_err(|e| errors::startup(&e))?
        }
        _ => return Err(value_error("give rank, world and rendezvous together, or none of them")),
    };
    let cfg = config.inner.clone();
    let started = py
        .detach(|| parma::node::start_with_launch(&launch, cfg.clone(), &opts, Options::default()))
        .map_err(errors::facade)?;
    let Some(node) = started else { return Ok(None) };
    let world = launch.world();
    let (cells, workers) = wrap_workers(py, node.workers, &cfg)?;
    Ok(Some(PyNode {
        nodes: Nodes { runtimes: Mutex::new(Some(vec![node.runtime])), cells, workers },
        rank: node.me.0,
        world,
    }))
}

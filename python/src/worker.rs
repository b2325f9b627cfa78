//! `parma.Worker`, `parma.Ticket`, `parma.PullTicket`.
//!
//! A Python `Worker` shares one [`Cell`] with its cluster: the Rust worker behind a mutex
//! (taken for every call, with the GIL released, so that a call that waits for the network
//! lets every other Python thread run) and the tickets Python dropped without waiting. Those
//! are waited for later, at most [`FORGOTTEN_MAX`] at a time, so that a loop that never waits
//! for its pushes keeps its memory flat.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use numpy::{PyArray1, PyArrayDyn, PyArrayMethods};
use parma::{
    Clock, Config, Conformity, DistId, Distribution, Key, Layout, PendingPull, SampleHandle, Ticket, Worker,
};
use pyo3::prelude::*;
use pyo3::types::{PyAny, PyDict};

use crate::arrays::{check_len, f32_array, keys_into, lengths};
use crate::errors::{self, parma_error, value_error};

/// Drawn keys and their values (`Worker.pull_sample`).
type Sample<'py> = (Bound<'py, PyArray1<u64>>, Bound<'py, PyArrayDyn<f32>>);

/// A node's workers: what the cluster keeps and what Python gets.
type Wrapped = (Vec<Arc<Cell>>, Vec<Py<PyWorker>>);

/// Tickets dropped unwaited that a worker keeps before it waits for them.
const FORGOTTEN_MAX: usize = 256;

enum Forgotten {
    Ticket(Ticket),
    Pull(PendingPull),
}

/// What a Python worker and its cluster share.
pub struct Cell {
    worker: Mutex<Option<Worker>>,
    forgotten: Mutex<Vec<Forgotten>>,
    pub id: u16,
    pub node: u16,
    /// The cluster's size: its nodes and the workers of each.
    pub nodes: u16,
    pub workers_per_node: u16,
    pub layout: Layout,
    /// Value lengths of the node's sampling distributions, by id (shared by its workers).
    dist_lens: Arc<Mutex<HashMap<u32, usize>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic inside a call is a bug of ours; the worker it held is still consistent enough
    // to be dropped, so the lock is taken anyway rather than panicking again.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Cell {
    pub fn new(worker: Worker, cfg: &Config, dist_lens: Arc<Mutex<HashMap<u32, usize>>>) -> Cell {
        Cell {
            id: worker.id().0,
            node: worker.node().0,
            nodes: cfg.nodes,
            workers_per_node: cfg.workers_per_node,
            worker: Mutex::new(Some(worker)),
            forgotten: Mutex::new(Vec::new()),
            layout: cfg.layout.clone(),
            dist_lens,
        }
    }

    /// Runs `f` on the worker (without the GIL: call it inside `Python::detach`), after
    /// waiting for forgotten tickets if there are many.
    fn with<R>(&self, f: impl FnOnce(&mut Worker) -> PyResult<R>) -> PyResult<R> {
        let mut g = lock(&self.worker);
        let w = g.as_mut().ok_or_else(|| finalized(self))?;
        let forgotten = {
            let mut fg = lock(&self.forgotten);
            if fg.len() >= FORGOTTEN_MAX {
                std::mem::take(&mut *fg)
            } else {
                Vec::new()
            }
        };
        settle(w, forgotten).map_err(errors::op)?;
        f(w)
    }

    /// Takes the worker out (to finalize it), waiting for its forgotten tickets first.
    pub fn take(&self) -> Option<Result<Worker, parma::OpError>> {
        let w = lock(&self.worker).take()?;
        let forgotten = std::mem::take(&mut *lock(&self.forgotten));
        let mut w = w;
        Some(settle(&mut w, forgotten).map(|()| w))
    }

    fn forget(&self, f: Forgotten) {
        lock(&self.forgotten).push(f);
    }
}

fn settle(w: &mut Worker, forgotten: Vec<Forgotten>) -> Result<(), parma::OpError> {
    let mut first = Ok(());
    for f in forgotten {
        let r = match f {
            Forgotten::Ticket(t) => w.wait(t),
            Forgotten::Pull(p) => {
                let mut scratch = vec![0.0; p.len()];
                w.finish_pull(p, &mut scratch)
            }
        };
        // A dropped ticket's failure is nobody's result; an error that ends the node
        // (closed, aborted, a peer failed) is reported by the call that comes next anyway.
        if let Err(e) = r {
            if first.is_ok() && is_fatal(e) {
                first = Err(e);
            }
        }
    }
    first
}

fn is_fatal(e: parma::OpError) -> bool {
    use parma::OpError::*;
    matches!(e, Closed | Aborted | PeerFailed { .. })
}

fn finalized(c: &Cell) -> PyErr {
    parma_error(
        "ClosedError",
        format!("worker {} of node {} was finalized (or its cluster shut down)", c.id, c.node),
    )
}

/// One training thread's handle on its node: pull, push, announce, advance the clock.
///
/// Every call that may wait (a pull of remote keys, `wait`, `barrier`, a gated
/// `advance_clock`, `finalize`, checkpoints) releases the GIL while it waits. Use one worker
/// per thread: calls on one worker from two threads are serialized.
#[pyclass(module = "parma._parma", name = "Worker", frozen)]
pub struct PyWorker {
    pub cell: Arc<Cell>,
}

/// An operation in flight (`Worker.push`, `set`, `localize`); `Worker.wait(ticket)` waits
/// for it. A ticket may be dropped without waiting: the worker then waits for it later.
#[pyclass(module = "parma._parma", name = "Ticket", frozen)]
pub struct PyTicket {
    ticket: Mutex<Option<Ticket>>,
    cell: Arc<Cell>,
}

impl PyTicket {
    fn new(t: Ticket, cell: &Arc<Cell>) -> PyTicket {
        PyTicket { ticket: Mutex::new(Some(t)), cell: cell.clone() }
    }
}

impl Drop for PyTicket {
    fn drop(&mut self) {
        if let Some(t) = lock(&self.ticket).take() {
            if !t.is_complete() {
                self.cell.forget(Forgotten::Ticket(t));
            }
        }
    }
}

#[pymethods]
impl PyTicket {
    /// Whether the operation completed in the call that issued it (every key was local) or
    /// was already waited for.
    #[getter]
    fn done(&self) -> bool {
        lock(&self.ticket).as_ref().is_none_or(Ticket::is_complete)
    }

    fn __repr__(&self) -> String {
        format!("<parma.Ticket of worker {} of node {}, done={}>", self.cell.id, self.cell.node, self.done())
    }
}

/// A pull whose remote keys are on their way (`Worker.pull_async`); keeps its output array
/// alive. `wait()` fills in the rest and returns the array.
#[pyclass(module = "parma._parma", name = "PullTicket", frozen)]
pub struct PyPullTicket {
    pending: Mutex<Option<PendingPull>>,
    out: Py<PyArrayDyn<f32>>,
    cell: Arc<Cell>,
}

impl Drop for PyPullTicket {
    fn drop(&mut self) {
        if let Some(p) = lock(&self.pending).take() {
            if !p.is_complete() {
                self.cell.forget(Forgotten::Pull(p));
            }
        }
    }
}

#[pymethods]
impl PyPullTicket {
    /// Whether every value is in the output array already.
    #[getter]
    fn done(&self) -> bool {
        lock(&self.pending).as_ref().is_none_or(PendingPull::is_complete)
    }

    /// Waits for the remote keys' values (GIL released) and returns the output array, then
    /// complete. Waiting twice returns the array again.
    fn wait<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        let out = self.out.bind(py).clone();
        let Some(p) = lock(&self.pending).take() else { return Ok(out) };
        {
            let mut rw = out.try_readwrite().map_err(|e| value_error(format!("the output array: {e}")))?;
            let vals =
                rw.as_slice_mut().map_err(|_| value_error("the output array is no longer contiguous"))?;
            let cell = &self.cell;
            py.detach(|| cell.with(|w| w.finish_pull(p, vals).map_err(errors::op)))?;
        }
        Ok(out)
    }
}

fn clock(c: u64) -> Clock {
    Clock(c)
}

impl PyWorker {
    fn keys(&self, obj: &Bound<'_, PyAny>) -> PyResult<Vec<Key>> {
        let mut keys = Vec::new();
        keys_into(obj, "keys", &mut keys)?;
        Ok(keys)
    }

    fn ticket(&self, py: Python<'_>, t: Ticket) -> PyResult<Py<PyTicket>> {
        Py::new(py, PyTicket::new(t, &self.cell))
    }

    fn new_output<'py>(
        &self,
        py: Python<'py>,
        n: usize,
        total: usize,
        same: Option<usize>,
    ) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        let flat = PyArray1::<f32>::zeros(py, total, false);
        match same {
            Some(d) => Ok(flat.reshape([n, d])?.to_dyn().clone()),
            None => Ok(flat.to_dyn().clone()),
        }
    }

    fn write(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
        set: bool,
    ) -> PyResult<Py<PyTicket>> {
        let keys = self.keys(keys)?;
        let (total, _) = lengths(&self.cell.layout, &keys)?;
        let arr = f32_array(values, "values")?;
        check_len(&arr, total, "values")?;
        let ro = arr.try_readonly().map_err(|e| value_error(format!("values: {e}")))?;
        let vals = ro.as_slice().map_err(|_| value_error("values must be C-contiguous"))?;
        let cell = &self.cell;
        let t = py.detach(|| {
            cell.with(|w| if set { w.set(&keys, vals) } else { w.push(&keys, vals) }.map_err(errors::op))
        })?;
        self.ticket(py, t)
    }
}

#[pymethods]
impl PyWorker {
    /// This worker's id within its node.
    #[getter]
    fn id(&self) -> u16 {
        self.cell.id
    }

    /// The node (rank) this worker belongs to.
    #[getter]
    fn node(&self) -> u16 {
        self.cell.node
    }

    /// The number of nodes in the cluster.
    #[getter]
    fn nodes(&self) -> u16 {
        self.cell.nodes
    }

    /// The number of workers of each node.
    #[getter]
    fn workers_per_node(&self) -> u16 {
        self.cell.workers_per_node
    }

    /// This worker's index among all the cluster's workers: `node * workers_per_node + id`.
    #[getter]
    fn rank(&self) -> u32 {
        u32::from(self.cell.node) * u32::from(self.cell.workers_per_node) + u32::from(self.cell.id)
    }

    /// This worker's clock (the number of `advance_clock` calls so far).
    #[getter]
    fn clock(&self, py: Python<'_>) -> PyResult<u64> {
        let cell = &self.cell;
        py.detach(|| cell.with(|w| Ok(w.clock().0)))
    }

    /// Whether `finalize` ran (or the cluster shut down): every call then raises `ClosedError`.
    #[getter]
    fn finalized(&self) -> bool {
        lock(&self.cell.worker).is_none()
    }

    /// pull(keys, out=None) -> numpy.ndarray
    ///
    /// Reads the values of `keys` (a 1-D NumPy array of uint64 or int64, or a sequence of
    /// ints) and waits for the remote ones, the GIL released. Into `out` if given (a
    /// C-contiguous float32 array of any shape holding exactly the keys' total length, written
    /// in place and returned); else into a new array, of shape `(len(keys), value_len)` when
    /// every key has the same length, else 1-D with the values concatenated. A key may appear
    /// more than once. Raises IndexError for a key outside the layout, ValueError for an `out`
    /// of the wrong size or not contiguous, TypeError for a wrong dtype; nothing is read then.
    #[pyo3(signature = (keys, out=None))]
    fn pull<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        let keys = self.keys(keys)?;
        let (total, same) = lengths(&self.cell.layout, &keys)?;
        let arr = match out {
            Some(o) => {
                let a = f32_array(o, "out")?;
                check_len(&a, total, "out")?;
                a
            }
            None => self.new_output(py, keys.len(), total, same)?,
        };
        {
            let mut rw = arr.try_readwrite().map_err(|e| value_error(format!("out: {e}")))?;
            let vals = rw.as_slice_mut().map_err(|_| value_error("out must be C-contiguous"))?;
            let cell = &self.cell;
            py.detach(|| cell.with(|w| w.pull(&keys, vals).map_err(errors::op)))?;
        }
        Ok(arr)
    }

    /// pull_async(keys, out=None) -> PullTicket
    ///
    /// Starts a pull: the values of local keys are copied into the output array now (`out`,
    /// or a new array shaped as `pull` shapes it), the remote ones are asked for;
    /// `PullTicket.wait()` fills them in and returns the array. The ticket keeps the array
    /// alive. Compute on something else meanwhile; don't read the array before `wait`.
    #[pyo3(signature = (keys, out=None))]
    fn pull_async(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        out: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyPullTicket> {
        let keys = self.keys(keys)?;
        let (total, same) = lengths(&self.cell.layout, &keys)?;
        let arr = match out {
            Some(o) => {
                let a = f32_array(o, "out")?;
                check_len(&a, total, "out")?;
                a
            }
            None => self.new_output(py, keys.len(), total, same)?,
        };
        let pending = {
            let mut rw = arr.try_readwrite().map_err(|e| value_error(format!("out: {e}")))?;
            let vals = rw.as_slice_mut().map_err(|_| value_error("out must be C-contiguous"))?;
            let cell = &self.cell;
            py.detach(|| cell.with(|w| w.pull_async(&keys, vals).map(|t| t.detach()).map_err(errors::op)))?
        };
        Ok(PyPullTicket { pending: Mutex::new(Some(pending)), out: arr.unbind(), cell: self.cell.clone() })
    }

    /// push(keys, values) -> Ticket
    ///
    /// Adds `values` (float32, C-contiguous, any shape, the keys' total length: each key's
    /// delta in key order) to `keys`. Local keys are updated now; the ticket completes when
    /// the rest were applied at their owners. Bad input raises before anything changed.
    fn push(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyTicket>> {
        self.write(py, keys, values, false)
    }

    /// set(keys, values) -> Ticket
    ///
    /// Replaces the values of `keys` with `values`, like `push`. A key named twice keeps the
    /// last value.
    fn set(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyTicket>> {
        self.write(py, keys, values, true)
    }

    /// wait(ticket)
    ///
    /// Waits (GIL released) for an operation this worker issued. Raises `parma.TimeoutError`,
    /// `parma.PeerFailedError` or `parma.ClosedError` if it failed; ValueError for a ticket of
    /// another worker. Waiting twice returns at once.
    fn wait(&self, py: Python<'_>, ticket: &PyTicket) -> PyResult<()> {
        if !Arc::ptr_eq(&ticket.cell, &self.cell) {
            return Err(value_error(format!(
                "this ticket belongs to worker {} of node {}, not to worker {} of node {}",
                ticket.cell.id, ticket.cell.node, self.cell.id, self.cell.node
            )));
        }
        let Some(t) = lock(&ticket.ticket).take() else { return Ok(()) };
        let cell = &self.cell;
        py.detach(|| cell.with(|w| w.wait(t).map_err(errors::op)))
    }

    /// announce(keys, start, end) -> Ticket | None
    ///
    /// Tells the node that this worker will access `keys` while its clock is in `[start,
    /// end)`; the node makes them local in time (intent under adaptive management, a
    /// `localize` under relocation, whose ticket is returned; nothing under static
    /// partitioning). Never waits. ValueError if `start >= end`.
    fn announce(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        start: u64,
        end: u64,
    ) -> PyResult<Option<Py<PyTicket>>> {
        let keys = self.keys(keys)?;
        let cell = &self.cell;
        let t =
            py.detach(|| cell.with(|w| w.announce(&keys, clock(start), clock(end)).map_err(errors::op)))?;
        t.map(|t| self.ticket(py, t)).transpose()
    }

    /// intent(keys, start, end)
    ///
    /// Signals intent to access `keys` while the clock is in `[start, end)` (what `announce`
    /// does under the adaptive techniques). Never waits. ValueError if `start >= end`.
    fn intent(&self, py: Python<'_>, keys: &Bound<'_, PyAny>, start: u64, end: u64) -> PyResult<()> {
        let keys = self.keys(keys)?;
        let cell = &self.cell;
        py.detach(|| cell.with(|w| w.intent(&keys, clock(start), clock(end)).map_err(errors::op)))
    }

    /// localize(keys) -> Ticket
    ///
    /// Asks the node to move `keys` here (relocation); the ticket completes when they are.
    fn localize(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Py<PyTicket>> {
        let keys = self.keys(keys)?;
        let cell = &self.cell;
        let t = py.detach(|| cell.with(|w| w.localize(&keys).map_err(errors::op)))?;
        self.ticket(py, t)
    }

    /// advance_clock() -> int
    ///
    /// Advances this worker's clock by one and returns it. Under a clock gate (bsp, ssp, ...)
    /// it then waits, GIL released, until the gate lets the worker go on.
    fn advance_clock(&self, py: Python<'_>) -> PyResult<u64> {
        let cell = &self.cell;
        py.detach(|| cell.with(|w| w.advance_clock().map(|c| c.0).map_err(errors::op)))
    }

    /// barrier()
    ///
    /// Waits (GIL released) until every worker of every node entered the barrier, after this
    /// worker's own operations completed. Raises `PeerFailedError` if a node failed.
    fn barrier(&self, py: Python<'_>) -> PyResult<()> {
        let cell = &self.cell;
        py.detach(|| cell.with(|w| w.barrier().map_err(errors::op)))
    }

    /// wait_sync()
    ///
    /// Returns after two more sync rounds of this node: every replica here was synchronized
    /// with its owner at least once after the call.
    fn wait_sync(&self, py: Python<'_>) -> PyResult<()> {
        let cell = &self.cell;
        py.detach(|| cell.with(|w| w.wait_sync().map_err(errors::op)))
    }

    /// finalize()
    ///
    /// Finishes this worker (collective: every worker of the cluster finalizes): waits for its
    /// operations, ends its intents, passes the last barriers. Afterwards every call raises
    /// `ClosedError`. A cluster's `shutdown` finalizes the workers not finalized yet.
    fn finalize(&self, py: Python<'_>) -> PyResult<()> {
        let cell = &self.cell;
        py.detach(|| match cell.take() {
            None => Ok(()),
            Some(Err(e)) => Err(errors::op(e)),
            Some(Ok(w)) => w.finalize().map_err(errors::op),
        })
    }

    /// stats() -> dict
    ///
    /// This worker's counters: keys pulled and pushed, locally and remotely, and commands
    /// that waited for room in the queue to the node.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = {
            let cell = &self.cell;
            py.detach(|| cell.with(|w| Ok(w.stats())))?
        };
        crate::stats::worker(py, &s)
    }

    /// register_uniform(start, end, conformity="conform") -> int
    ///
    /// Registers the uniform distribution over keys `[start, end)` for sampling under the
    /// conformity level (`conform`, `bounded`, `long-term`, `non-conform`) and returns its
    /// id. Every node registers the same distributions in the same order.
    #[pyo3(signature = (start, end, conformity="conform"))]
    fn register_uniform(&self, py: Python<'_>, start: u64, end: u64, conformity: &str) -> PyResult<u32> {
        let c = parse_conformity(conformity)?;
        let d = Distribution::uniform(Key(start), Key(end)).map_err(errors::sampling)?;
        let len = common_len(&self.cell.layout, start, end)?;
        self.register(py, d, c, len)
    }

    /// register_weighted(weights, first_key=0, conformity="conform") -> int
    ///
    /// Registers a distribution over keys `first_key .. first_key + len(weights)`, each key
    /// drawn with probability proportional to its weight (a sequence or array of floats).
    #[pyo3(signature = (weights, first_key=0, conformity="conform"))]
    fn register_weighted(
        &self,
        py: Python<'_>,
        weights: Vec<f64>,
        first_key: u64,
        conformity: &str,
    ) -> PyResult<u32> {
        let c = parse_conformity(conformity)?;
        let end = first_key
            .checked_add(weights.len() as u64)
            .ok_or_else(|| value_error("first_key + len(weights) overflows"))?;
        let keys: Vec<Key> = (first_key..end).map(Key).collect();
        let d = Distribution::weighted(&keys, &weights).map_err(errors::sampling)?;
        let len = common_len(&self.cell.layout, first_key, end)?;
        self.register(py, d, c, len)
    }

    /// prepare_sample(dist, n, start, end) -> int
    ///
    /// Prepares `n` samples of distribution `dist` that this worker will use while its clock
    /// is in `[start, end)`; returns a handle for `pull_sample`. Never waits.
    fn prepare_sample(&self, py: Python<'_>, dist: u32, n: u64, start: u64, end: u64) -> PyResult<u64> {
        let cell = &self.cell;
        py.detach(|| {
            cell.with(|w| {
                w.prepare_sample(DistId(dist), n, clock(start), clock(end)).map(|h| h.0).map_err(errors::op)
            })
        })
    }

    /// pull_sample(handle, k) -> (keys, values)
    ///
    /// The next `k` samples of `handle`: their keys (uint64) and values (shape `(k, len)`).
    fn pull_sample<'py>(&self, py: Python<'py>, handle: u64, k: usize) -> PyResult<Sample<'py>> {
        let len = self.sample_len(handle)?;
        let mut keys = vec![Key(0); k];
        let mut vals = vec![0.0f32; k * len];
        let cell = &self.cell;
        py.detach(|| {
            cell.with(|w| w.pull_sample(SampleHandle(handle), &mut keys, &mut vals).map_err(errors::op))
        })?;
        let keys = PyArray1::from_vec(py, keys.into_iter().map(|k| k.0).collect());
        let vals = PyArray1::from_vec(py, vals).reshape([k, len])?.to_dyn().clone();
        Ok((keys, vals))
    }

    /// finish_sample(handle)
    ///
    /// Ends `handle`; samples not pulled are dropped.
    fn finish_sample(&self, py: Python<'_>, handle: u64) -> PyResult<()> {
        let cell = &self.cell;
        py.detach(|| cell.with(|w| w.finish_sample(SampleHandle(handle)).map_err(errors::op)))
    }

    /// checkpoint(dir, extra=None)
    ///
    /// Writes a consistent snapshot of the whole model to the directory `dir` (collective:
    /// every worker of every node calls it at the same point with the same `dir`); `extra`, a
    /// dict of strings, is recorded in the manifest. Waits with the GIL released.
    #[pyo3(signature = (dir, extra=None))]
    fn checkpoint(
        &self,
        py: Python<'_>,
        dir: PathBuf,
        extra: Option<BTreeMap<String, String>>,
    ) -> PyResult<()> {
        let extra = extra.unwrap_or_default();
        let cell = &self.cell;
        py.detach(|| cell.with(|w| w.checkpoint(&dir, &extra).map_err(errors::checkpoint)))
    }

    /// restore(dir) -> dict
    ///
    /// Replaces the whole model with the checkpoint in `dir`, written by a cluster of any
    /// size (collective, like `checkpoint`). A checkpoint that is damaged or of another model
    /// is refused before anything changed. Returns the manifest as a dict.
    fn restore<'py>(&self, py: Python<'py>, dir: PathBuf) -> PyResult<Bound<'py, PyDict>> {
        let cell = &self.cell;
        let m = py.detach(|| cell.with(|w| w.restore(&dir).map_err(errors::checkpoint)))?;
        crate::stats::manifest(py, &m)
    }

    fn __repr__(&self) -> String {
        format!("<parma.Worker {} of node {}>", self.cell.id, self.cell.node)
    }
}

impl PyWorker {
    fn register(&self, py: Python<'_>, d: Distribution, c: Conformity, len: usize) -> PyResult<u32> {
        let cell = &self.cell;
        let id = py.detach(|| cell.with(|w| w.register_distribution(d, c).map_err(errors::op)))?;
        lock(&self.cell.dist_lens).insert(id.0, len);
        Ok(id.0)
    }

    fn sample_len(&self, handle: u64) -> PyResult<usize> {
        if let Some(l) = self.cell.layout.uniform_len() {
            return Ok(l);
        }
        // A handle names its distribution only inside the sampler: every distribution of a
        // layout of ranges must then share one length for the buffer to be sized.
        let lens = lock(&self.cell.dist_lens);
        let mut it = lens.values();
        match (it.next(), it.all(|l| Some(l) == lens.values().next())) {
            (Some(&l), true) => Ok(l),
            _ => Err(value_error(format!(
                "pull_sample({handle}): under a layout of ranges, every registered distribution must cover keys of one \
                 value length"
            ))),
        }
    }
}

fn parse_conformity(name: &str) -> PyResult<Conformity> {
    Conformity::from_name(name).ok_or_else(|| {
        let all: Vec<&str> = Conformity::ALL.iter().map(|c| c.name()).collect();
        value_error(format!("unknown conformity `{name}`; one of: {}", all.join(", ")))
    })
}

/// The one value length of keys `[start, end)`, or a ValueError.
fn common_len(layout: &Layout, start: u64, end: u64) -> PyResult<usize> {
    if end > layout.key_end() || start >= end {
        return Err(pyo3::exceptions::PyIndexError::new_err(format!(
            "the keys {start}..{end} are not inside the layout (keys 0..{})",
            layout.key_end()
        )));
    }
    if let Some(l) = layout.uniform_len() {
        return Ok(l);
    }
    let ranges = layout.canonical_ranges();
    let mut len = None;
    for (i, &(first, l)) in ranges.iter().enumerate() {
        let next = ranges.get(i + 1).map_or(layout.key_end(), |r| r.0);
        if first < end && next > start {
            match len {
                None => len = Some(l as usize),
                Some(x) if x != l as usize => {
                    return Err(value_error(format!(
                        "the keys {start}..{end} have values of different lengths; a distribution covers keys of one length"
                    )))
                }
                _ => {}
            }
        }
    }
    len.ok_or_else(|| value_error("no keys"))
}

/// Wraps the workers of a node for Python.
pub fn wrap_workers(py: Python<'_>, workers: Vec<Worker>, cfg: &Config) -> PyResult<Wrapped> {
    let lens = Arc::new(Mutex::new(HashMap::new()));
    let mut cells = Vec::new();
    let mut objs = Vec::new();
    for w in workers {
        let cell = Arc::new(Cell::new(w, cfg, lens.clone()));
        objs.push(Py::new(py, PyWorker { cell: cell.clone() })?);
        cells.push(cell);
    }
    Ok((cells, objs))
}

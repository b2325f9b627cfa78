//! The extension module `parma._parma`: the binding behind `import parma`.
//!
//! It mirrors the Rust façade (`parma/`): a [`config::PyConfig`] and [`config::PyLayout`], an
//! in-process cluster and a node of a multi-process cluster ([`cluster`]), and one
//! [`worker::PyWorker`] per training thread. Arrays cross as NumPy arrays (values without a
//! copy); every call that may wait releases the GIL; errors become Python exceptions
//! ([`errors`]). The pure-Python package around it (`python/parma/`) adds the exception
//! classes and `parma.torch`.
#![forbid(unsafe_code)]

mod arrays;
mod cluster;
mod config;
mod errors;
mod stats;
mod worker;

use numpy::{PyArray1, PyArrayDyn, PyArrayMethods};
use pyo3::prelude::*;

/// default_lookahead(examples_per_step) -> int
///
/// How many steps ahead to announce keys when each step uses `examples_per_step` examples:
/// about 1,024 examples' worth, at least 8 and at most 1,024 steps.
#[pyfunction]
fn default_lookahead(examples_per_step: usize) -> usize {
    parma::default_lookahead(examples_per_step)
}

/// checkpoint_table(dir, start, end) -> numpy.ndarray
///
/// The rows of keys `[start, end)` of the checkpoint in `dir` as one `(end - start, len)`
/// float32 array (keys never written hold their initial value), after checking the
/// checkpoint. Every key of the range must have the same value length.
#[pyfunction]
fn checkpoint_table<'py>(
    py: Python<'py>,
    dir: std::path::PathBuf,
    start: u64,
    end: u64,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let (rows, vals) = py
        .detach(|| parma::checkpoint::Checkpoint::open(&dir).and_then(|ck| ck.table(start..end)))
        .map_err(errors::checkpoint)?;
    let len = vals.len().checked_div(rows).unwrap_or(0);
    Ok(PyArray1::from_vec(py, vals).reshape([rows, len])?.to_dyn().clone())
}

/// free_port(host="127.0.0.1") -> int
///
/// A TCP port that was free on `host` a moment ago, outside the ephemeral range: for a
/// program that picks the rendezvous port itself and hands it to every node.
#[pyfunction]
#[pyo3(signature = (host="127.0.0.1"))]
fn free_port(host: &str) -> PyResult<u16> {
    let ip: std::net::IpAddr =
        host.parse().map_err(|_| errors::value_error(format!("`{host}` is not an IP address")))?;
    parma::startup::free_rendezvous_port(ip).map_err(|e| errors::parma_error("StartupError", e.to_string()))
}

#[pymodule]
fn _parma(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<config::PyLayout>()?;
    m.add_class::<config::PyConfig>()?;
    m.add_class::<cluster::PyLocalCluster>()?;
    m.add_class::<cluster::PyNode>()?;
    m.add_class::<worker::PyWorker>()?;
    m.add_class::<worker::PyTicket>()?;
    m.add_class::<worker::PyPullTicket>()?;
    m.add_function(wrap_pyfunction!(cluster::start_node, m)?)?;
    m.add_function(wrap_pyfunction!(default_lookahead, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoint_table, m)?)?;
    m.add_function(wrap_pyfunction!(free_port, m)?)?;
    m.add("LOOKAHEAD_EXAMPLES", parma::LOOKAHEAD_EXAMPLES)?;
    m.add("LOOKAHEAD_MAX", parma::LOOKAHEAD_MAX)?;
    Ok(())
}

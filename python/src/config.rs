//! `parma.Layout` and `parma.Config`.

use parma::{Config, Gate, Init, Layout, NodeId, Placement, Technique};
use pyo3::prelude::*;
use pyo3::types::{PyAny, PyTuple};

use crate::errors::{config, value_error};

/// Which keys exist and how many float32s each key's value holds.
///
/// Make one with `Layout.uniform(key_end, value_len)` (keys `0..key_end`, every value
/// `value_len` floats) or `Layout.ranges(key_end, [(first_key, value_len), ...])` (consecutive
/// ranges, the first starting at key 0, each lasting until the next starts).
#[pyclass(module = "parma._parma", name = "Layout", frozen)]
#[derive(Clone)]
pub struct PyLayout {
    pub inner: Layout,
}

#[pymethods]
impl PyLayout {
    /// Keys `0..key_end`, every value `value_len` floats long.
    #[staticmethod]
    fn uniform(key_end: u64, value_len: u32) -> PyResult<PyLayout> {
        Ok(PyLayout { inner: Layout::uniform(key_end, value_len).map_err(config)? })
    }

    /// Keys `0..key_end` in ranges: `ranges` is a list of `(first_key, value_len)` pairs, the
    /// first at key 0, first keys strictly increasing; a range lasts until the next starts.
    #[staticmethod]
    fn ranges(key_end: u64, ranges: Vec<(u64, u32)>) -> PyResult<PyLayout> {
        Ok(PyLayout { inner: Layout::ranges(key_end, ranges).map_err(config)? })
    }

    /// One past the largest key.
    #[getter]
    fn key_end(&self) -> u64 {
        self.inner.key_end()
    }

    /// The value length of `key`; `IndexError` for a key outside the layout.
    fn len_of(&self, key: u64) -> PyResult<usize> {
        self.inner.len_of(parma::Key(key)).ok_or_else(|| {
            pyo3::exceptions::PyIndexError::new_err(format!(
                "key {key} is outside the layout (keys 0..{})",
                self.inner.key_end()
            ))
        })
    }

    /// The value length every key shares, or `None` for a layout of ranges.
    #[getter]
    fn uniform_len(&self) -> Option<usize> {
        self.inner.uniform_len()
    }

    /// `(first_key, value_len)` of every range (one range for a uniform layout).
    fn range_list(&self) -> Vec<(u64, u32)> {
        self.inner.canonical_ranges()
    }

    fn __repr__(&self) -> String {
        match self.inner.uniform_len() {
            Some(l) => format!("Layout.uniform({}, {l})", self.inner.key_end()),
            None => format!("Layout.ranges({}, {:?})", self.inner.key_end(), self.inner.canonical_ranges()),
        }
    }
}

/// The configuration every node of a cluster shares.
///
/// `Config(nodes, workers_per_node, layout, *, technique="adaptive", gate="async",
/// placement="dense", seed=0x5eed, init="zero", request_timeout=60.0)`:
///
/// - `technique`: `adaptive` (AdaPM, the default), `adaptive-no-replication`,
///   `adaptive-no-relocation`, `static`, `relocation`, `full-replication`, `multi-technique`;
/// - `gate`: `async`, `bsp`, `ssp:S`, `bounded-delay:T`, `sparse-ssp:S:P`;
/// - `placement`: `dense` or `hashed`;
/// - `init`: `"zero"`, or `("uniform", scale)` for values uniform in `[-scale, scale)`, a
///   function of (seed, key, element), so the same on every cluster size;
/// - `request_timeout`: seconds after which a remote operation fails with `parma.TimeoutError`.
///
/// Invalid values raise `ValueError` here, before any node starts.
#[pyclass(module = "parma._parma", name = "Config", frozen)]
#[derive(Clone)]
pub struct PyConfig {
    pub inner: Config,
}

#[pymethods]
impl PyConfig {
    #[new]
    #[pyo3(signature = (nodes, workers_per_node, layout, *, technique="adaptive", gate="async",
        placement="dense", seed=0x5eed, init=None, request_timeout=60.0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        nodes: u16,
        workers_per_node: u16,
        layout: &PyLayout,
        technique: &str,
        gate: &str,
        placement: &str,
        seed: u64,
        init: Option<&Bound<'_, PyAny>>,
        request_timeout: f64,
    ) -> PyResult<PyConfig> {
        let names = |all: &[&str]| all.join(", ");
        let technique = Technique::from_name(technique).ok_or_else(|| {
            let all: Vec<&str> = Technique::ALL.iter().map(|t| t.name()).collect();
            value_error(format!("unknown technique `{technique}`; one of: {}", names(&all)))
        })?;
        let gate = Gate::from_name(gate).ok_or_else(|| {
            value_error(format!(
                "unknown gate `{gate}`; one of: async, bsp, ssp:S, bounded-delay:T, sparse-ssp:S:P"
            ))
        })?;
        let placement = Placement::from_name(placement)
            .ok_or_else(|| value_error(format!("unknown placement `{placement}`; one of: dense, hashed")))?;
        let init = parse_init(init)?;
        if !(request_timeout.is_finite() && request_timeout > 0.0 && request_timeout < 1e9) {
            return Err(value_error(format!(
                "request_timeout must be a positive number of seconds, not {request_timeout}"
            )));
        }
        let cfg = Config::new(nodes, workers_per_node, layout.inner.clone())
            .with_technique(technique)
            .with_gate(gate)
            .with_placement(placement)
            .with_seed(seed)
            .with_init(init)
            .with_request_timeout(parma::time::Duration((request_timeout * 1e6) as u64));
        cfg.validate(NodeId(0)).map_err(config)?;
        Ok(PyConfig { inner: cfg })
    }

    /// Number of nodes.
    #[getter]
    fn nodes(&self) -> u16 {
        self.inner.nodes
    }

    /// Workers (training threads) per node.
    #[getter]
    fn workers_per_node(&self) -> u16 {
        self.inner.workers_per_node
    }

    /// The layout.
    #[getter]
    fn layout(&self) -> PyLayout {
        PyLayout { inner: self.inner.layout.clone() }
    }

    /// The technique's name.
    #[getter]
    fn technique(&self) -> &'static str {
        self.inner.technique.name()
    }

    /// The gate's name.
    #[getter]
    fn gate(&self) -> String {
        self.inner.gate.name()
    }

    /// The seed.
    #[getter]
    fn seed(&self) -> u64 {
        self.inner.seed
    }

    fn __repr__(&self) -> String {
        format!(
            "Config(nodes={}, workers_per_node={}, layout={}, technique={:?}, gate={:?})",
            self.inner.nodes,
            self.inner.workers_per_node,
            PyLayout { inner: self.inner.layout.clone() }.__repr__(),
            self.inner.technique.name(),
            self.inner.gate.name()
        )
    }
}

fn parse_init(init: Option<&Bound<'_, PyAny>>) -> PyResult<Init> {
    let Some(init) = init else { return Ok(Init::Zero) };
    if let Ok(s) = init.extract::<String>() {
        return match s.as_str() {
            "zero" => Ok(Init::Zero),
            _ => Err(value_error(format!("unknown init `{s}`; \"zero\" or (\"uniform\", scale)"))),
        };
    }
    if let Ok(t) = init.cast::<PyTuple>() {
        if let Ok((kind, scale)) = t.extract::<(String, f32)>() {
            if kind == "uniform" {
                if !(scale.is_finite() && scale > 0.0) {
                    return Err(value_error(format!(
                        "the uniform init's scale must be positive, not {scale}"
                    )));
                }
                return Ok(Init::Uniform { scale });
            }
        }
    }
    Err(value_error("init must be \"zero\" or (\"uniform\", scale)"))
}

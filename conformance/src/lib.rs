//! # parma-conformance
//!
//! What every transport and every technique must pass: the invariant checkers, the
//! deterministic cluster simulator, and (in `traces/`) the conformance traces with the harness
//! that runs them. This crate depends on no particular real transport; the simulator uses the
//! loopback crate's simulated network, which is part of the test bench, not a product.
//! [`process`] runs the traces with one process per node over ZeroMQ; the program those
//! processes run is the `parma` binary's, which this crate is told where to find. The traces
//! over ZeroMQ in one process run in parma-cli too (`parma_cli::conformance_zmq`), which names
//! the transport.
//!
//! [`skew`] runs skewed, training-like workloads on the simulator to compare the techniques on
//! the same accesses (`parma techniques` prints its tables).
#![forbid(unsafe_code)]

pub mod kit;
pub mod process;
pub mod rng;
pub mod sim;
pub mod skew;
pub mod suite;
pub mod trace;

/// The distinct keys of `keys`, in first-seen order (what a node's pull of them fetches).
pub(crate) fn distinct(keys: &[parma_core::Key]) -> Vec<parma_core::Key> {
    let mut seen = std::collections::HashSet::with_capacity(keys.len());
    keys.iter().copied().filter(|k| seen.insert(*k)).collect()
}

//! # parma-conformance
//!
//! What every transport and every technique must pass: the invariant checkers, the
//! deterministic cluster simulator, and (in `traces/`) the conformance traces with the harness
//! that runs them. This crate depends on no particular real transport; the simulator uses the
//! loopback crate's simulated network, which is part of the test bench, not a product.

pub mod rng;
pub mod sim;
pub mod suite;
pub mod trace;

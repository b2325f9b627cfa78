//! # parma-cli: the command-line tool
//!
//! ## Room
//!
//! This crate holds the `parma` binary: argument parsing over the training tasks
//! (`parma-train`), the façade and the experiments it starts, which live here. It uses only
//! the public APIs of `parma-train`, `parma-core` (configuration, layout, ids, counters),
//! `parma-runtime` (nodes and worker handles), the transports and the simulator of
//! `parma-conformance`; it never reaches into the protocol's internals. It is the one crate
//! that names the transports the conformance suite runs over as well ([`conformance_zmq`]).
//!
//! - [`demo`]: a skewed random workload on an in-process cluster (over the threaded loopback,
//!   or ZeroMQ on 127.0.0.1), with a report of where the key accesses were served and what the
//!   network carried (`parma demo`).
//! - [`export`]: a key range of a checkpoint as an embedding table, `.npy` or safetensors
//!   (`parma checkpoint export`).
//! - [`verify`]: the simulator's seeds (`parma sim`) and the conformance suite on the loopback
//!   transports, over ZeroMQ, and with one process per node (`parma conformance`).
//! - [`sampling`]: the KGE-like workload with its negatives drawn by the sampling manager
//!   under each conformity level, and what sampling cost (`parma sampling`).
//! - [`node`]: one node of a cluster of processes over ZeroMQ (`parma node`), started by a
//!   launcher (`parma launch`, torchrun, Slurm, MPI, ps-lite's variables), running a workload
//!   whose sums it checks exactly; `parma_train::metrics` serves its counters to Prometheus.
//! - [`conformance_zmq`]: the conformance suite's ZeroMQ transports, in one process (`zmq`)
//!   and as the agent of `zmq-processes` (`parma conformance-agent`).
//! - [`scaling`]: the same workload at several cluster sizes with the same work per node, and
//!   what grows with the cluster (`parma scaling`).
//! - [`techniques`]: a skewed, training-like workload under every technique on the
//!   deterministic simulated cluster of `parma-conformance`, with a table (`parma techniques`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod conformance_zmq;
pub mod demo;
pub mod export;
pub mod gates;
pub mod node;
pub mod node_transport;
pub mod sampling;
pub mod scaling;
pub mod techniques;
pub mod verify;

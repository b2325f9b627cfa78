//! # parma-apps: the command-line tool and the training tasks
//!
//! ## Room
//!
//! This crate holds what runs on top of parma: the `parma` binary and the workloads it starts.
//! It uses only the public APIs of `parma-core` (configuration, layout, ids, counters),
//! `parma-runtime` (nodes and worker handles), the transports and the simulator of
//! `parma-conformance`; it never reaches into the protocol's internals.
//!
//! - [`demo`]: a skewed random workload on an in-process cluster (over the threaded loopback,
//!   or ZeroMQ on 127.0.0.1), with a report of where the key accesses were served and what the
//!   network carried (`parma demo`).
//! - [`export`]: a key range of a checkpoint as an embedding table, `.npy` or safetensors
//!   (`parma checkpoint export`).
//! - [`fetch`]: data sets that may not be redistributed, fetched with pip into a cache and
//!   checked against a pinned sha256 (`parma data fetch`).
//! - [`verify`]: the simulator's seeds (`parma sim`) and the conformance suite on the loopback
//!   transports, over ZeroMQ, and with one process per node (`parma conformance`).
//! - [`sampling`]: the KGE-like workload with its negatives drawn by the sampling manager
//!   under each conformity level, and what sampling cost (`parma sampling`).
//! - [`train`]: training real models (knowledge-graph embeddings) on an in-process cluster,
//!   and the same models on a shared-memory baseline without parma (`parma train`).
//! - [`node`]: one node of a cluster of processes over ZeroMQ (`parma node`), started by a
//!   launcher (`parma launch`, torchrun, Slurm, MPI, ps-lite's variables), running a workload
//!   whose sums it checks exactly; [`metrics`] serves its counters to Prometheus.
//! - [`techniques`]: a skewed, training-like workload under every technique on the
//!   deterministic simulated cluster of `parma-conformance`, with a table (`parma techniques`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod demo;
pub mod export;
pub mod fetch;
pub mod gates;
pub mod metrics;
pub mod node;
pub mod node_transport;
pub mod sampling;
pub mod techniques;
pub mod train;
pub mod verify;

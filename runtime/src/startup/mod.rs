//! Start-up: how a node process learns its rank, the world size and where its peers are.
//!
//! ## Room
//!
//! This module runs once, before the node: it reads what the launcher put in the
//! environment ([`Launch`]), loads the cluster's secret ([`ClusterToken`]), and meets the
//! other nodes at a rendezvous that hands every node the [`PeerTable`] (each rank's endpoint
//! and the configuration digest they share). It knows nothing of the transport: an endpoint
//! is an opaque string (`tcp://10.0.0.5:40123` for ZeroMQ, something else for RDMA), and
//! nothing here runs after the table is out. It uses plain blocking `std::net` TCP; every
//! read is bounded in size and time, every wait ends.
//!
//! ## Launchers
//!
//! [`Launch::from_env`] recognizes, first match wins: parma's own variables (`PARMA_RANK`,
//! `PARMA_WORLD_SIZE`, `PARMA_RENDEZVOUS`), torchrun's (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`,
//! `MASTER_PORT`), Slurm's (`SLURM_PROCID`, `SLURM_NTASKS`, the first host of the step's or
//! job's node list, port `PARMA_RENDEZVOUS_PORT` or [`SLURM_PORT_BASE`] plus the job id
//! modulo [`SLURM_PORT_SPREAD`]), Open MPI's and MPICH's ranks with `PARMA_RENDEZVOUS`, and
//! ps-lite's (`DMLC_ROLE`, `DMLC_NUM_SERVER`, `DMLC_PS_ROOT_URI`, `DMLC_PS_ROOT_PORT`,
//! `DMLC_NODE_HOST`). `docs/deploy.md` has the table.
//!
//! ps-lite gives no ranks: its `server`s are parma's nodes and get their ranks from the
//! rendezvous in the order they registered; its `scheduler` runs the rendezvous only
//! ([`Role::Scheduler`]); its `worker`s have nothing to do ([`Role::Worker`]), since parma's
//! workers are threads inside each node.
//!
//! ## The rendezvous
//!
//! Rank 0 (or ps-lite's scheduler) listens on the rendezvous address ([`Rendezvous`]); every
//! node, rank 0 included, registers ([`join`]) with its rank (or none), the world size, the
//! configuration digest and its endpoint, and both ends prove the token to each other with
//! HMAC-SHA-256 over fresh nonces and the registration (the token never crosses the wire).
//! Once every rank registered, each node gets the table and the connections close. A node
//! whose digest, world size or rank cannot fit the world ends the rendezvous for all with
//! an error naming it; nodes missing at the timeout are named in the rendezvous's error,
//! which every registered node gets too. [`establish`] does all of it in one call.
//!
//! ## Example
//!
//! ```
//! use std::time::Duration;
//! use parma_core::NodeId;
//! use parma_runtime::startup::{join, ClusterToken, Launch, Rendezvous, RendezvousAddr, RendezvousOptions};
//!
//! let token = ClusterToken::from_secret(*b"not a real secret").unwrap();
//! let (world, digest, timeout) = (3, 0x5eed, Duration::from_secs(10));
//! // Tests bind port 0; a real world uses the launcher's address (`startup::establish`).
//! let addr = RendezvousAddr { host: "127.0.0.1".into(), port: 0 };
//! let rendezvous = Rendezvous::bind(&addr, world, digest, &token, RendezvousOptions::default()).unwrap();
//! let at = rendezvous.local_addr().unwrap().to_string();
//! std::thread::scope(|s| {
//!     let server = s.spawn(|| rendezvous.run(timeout));
//!     let nodes: Vec<_> = (0..world)
//!         .map(|r| {
//!             let (token, at) = (&token, &at);
//!             s.spawn(move || {
//!                 let launch = Launch::explicit(NodeId(r), world, at).unwrap();
//!                 join(&launch, &format!("tcp://127.0.0.1:{}", 7000 + r), digest, token, timeout)
//!             })
//!         })
//!         .collect();
//!     for (r, node) in nodes.into_iter().enumerate() {
//!         let table = node.join().unwrap().unwrap();
//!         assert_eq!(table.me(), Some(NodeId(r as u16)));
//!         assert_eq!(table.endpoint(NodeId(2)), Some("tcp://127.0.0.1:7002"));
//!     }
//!     assert_eq!(server.join().unwrap().unwrap().table.world(), 3);
//! });
//! ```

mod error;
pub mod hostlist;
mod join;
mod launch;
mod node;
mod port;
mod rendezvous;
mod table;
mod token;
mod wire;

#[cfg(test)]
mod docs_tests;

use std::time::Duration;

use parma_core::NodeId;

pub use error::StartupError;
pub use join::join;
pub use launch::{Launch, Launcher, RendezvousAddr, Role, SLURM_PORT_BASE, SLURM_PORT_SPREAD};
pub use node::{connect, start_node, BoundTransport, NodeStartError, StartedNode};
/// The configuration digest nodes bring to the rendezvous and to every session handshake, and
/// its hash: computed in the core (`docs/session.md`, "The configuration digest").
pub use parma_core::digest::{cluster_digest, fnv1a};
pub use port::free_rendezvous_port;
pub use rendezvous::{serve, Refusals, Rendezvous, RendezvousOptions, ServeReport};
pub use table::PeerTable;
pub use token::{ClusterToken, TOKEN_FILE_LEN_MAX, TOKEN_FILE_VAR, TOKEN_VAR};
pub use wire::ENDPOINT_LEN_MAX;

/// Start-up in one call: for rank 0, runs the rendezvous on a thread and registers there
/// too; for other nodes, registers; for ps-lite's scheduler, runs the rendezvous only (its
/// table's [`PeerTable::me`] is `None`: it is not a node, and should exit). A ps-lite worker
/// gets [`StartupError::NotANode`]. `digest` is the shared configuration's
/// ([`cluster_digest`], as in [`parma_core::session::Identity`]).
///
/// For rank 0, when the rendezvous fails, its error is returned (it names the missing ranks
/// or the node at fault); rank 0 registers through the address the rendezvous bound, so
/// that it can always reach it.
pub fn establish(
    launch: &Launch,
    advertised: &str,
    digest: u64,
    token: &ClusterToken,
    timeout: Duration,
) -> Result<PeerTable, StartupError> {
    let bind =
        || Rendezvous::bind(launch.rendezvous(), launch.world(), digest, token, RendezvousOptions::default());
    match (launch.role(), launch.rank()) {
        (Role::Worker, _) => Err(StartupError::NotANode { role: Role::Worker }),
        (Role::Scheduler, _) => Ok(bind()?.run(timeout)?.table),
        (Role::Node, Some(NodeId(0))) => {
            // Checked before the rendezvous starts: it would wait for this node in vain.
            wire::check_endpoint(advertised)
                .map_err(|why| StartupError::BadEndpoint { endpoint: advertised.to_string(), why })?;
            let rendezvous = bind()?;
            let at = own_address(&rendezvous, launch.rendezvous());
            std::thread::scope(|s| {
                let server = std::thread::Builder::new()
                    .name("parma-rendezvous".into())
                    .spawn_scoped(s, move || rendezvous.run(timeout))
                    .map_err(|error| StartupError::Listen { addr: launch.rendezvous().to_string(), error })?;
                let joined =
                    join::join_at(&at, Some(NodeId(0)), launch.world(), advertised, digest, token, timeout);
                match (joined, server.join()) {
                    (Ok(table), _) => Ok(table),
                    // Unless rank 0 itself is missing: then its own error says why.
                    (Err(e), Ok(Err(StartupError::Missing { missing, .. })))
                        if missing.contains(&NodeId(0)) =>
                    {
                        Err(e)
                    }
                    (Err(_), Ok(Err(served))) => Err(served),
                    (Err(e), _) => Err(e),
                }
            })
        }
        (Role::Node, _) => join(launch, advertised, digest, token, timeout),
    }
}

/// Where rank 0 reaches its own rendezvous: the address bound (loopback for a wildcard).
fn own_address(rendezvous: &Rendezvous, fallback: &RendezvousAddr) -> RendezvousAddr {
    match rendezvous.local_addr() {
        Ok(a) if a.ip().is_unspecified() && a.is_ipv4() => {
            RendezvousAddr { host: "127.0.0.1".into(), port: a.port() }
        }
        Ok(a) if a.ip().is_unspecified() => RendezvousAddr { host: "::1".into(), port: a.port() },
        Ok(a) => RendezvousAddr { host: a.ip().to_string(), port: a.port() },
        Err(_) => fallback.clone(),
    }
}

//! The peer table: what the rendezvous hands every node.

use std::fmt;
use std::sync::Arc;

use parma_core::config::NODES_MAX;
use parma_core::NodeId;

use super::{wire, StartupError};

/// Every node's advertised endpoint, by rank, and the digest of the configuration they
/// share. Cloning it is cheap (the endpoints are shared).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerTable {
    me: Option<NodeId>,
    digest: u64,
    endpoints: Arc<[Box<str>]>,
}

impl PeerTable {
    /// A table given by hand (a transport's tests): 1 to `NODES_MAX` endpoints of 1 to 255
    /// bytes without control characters, and `me` among their ranks.
    pub fn new(me: Option<NodeId>, digest: u64, endpoints: Vec<String>) -> Result<PeerTable, StartupError> {
        if endpoints.is_empty() || endpoints.len() > usize::from(NODES_MAX) {
            let why = format!("a world has 1 to {NODES_MAX} nodes");
            return Err(StartupError::BadVar { var: "endpoints", value: endpoints.len().to_string(), why });
        }
        for e in &endpoints {
            wire::check_endpoint(e).map_err(|why| StartupError::BadEndpoint { endpoint: e.clone(), why })?;
        }
        if let Some(me) = me.filter(|me| me.index() >= endpoints.len()) {
            return Err(StartupError::RankOutsideWorld { rank: me.0, world: endpoints.len() as u16 });
        }
        Ok(PeerTable::from_parts(me, digest, endpoints))
    }

    /// A table the rendezvous checked.
    pub(crate) fn from_parts(me: Option<NodeId>, digest: u64, endpoints: Vec<String>) -> PeerTable {
        PeerTable { me, digest, endpoints: endpoints.into_iter().map(String::into_boxed_str).collect() }
    }

    /// This node's rank (assigned by the rendezvous if the launcher gave none); `None` for
    /// the table a scheduler or a bare rendezvous holds.
    pub fn me(&self) -> Option<NodeId> {
        self.me
    }

    /// The number of nodes.
    pub fn world(&self) -> u16 {
        // At most NODES_MAX entries (checked where tables are made).
        self.endpoints.len() as u16
    }

    /// The configuration digest every node registered with.
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// The endpoint `rank` advertised.
    pub fn endpoint(&self, rank: NodeId) -> Option<&str> {
        self.endpoints.get(rank.index()).map(|e| &**e)
    }

    /// Every node and its endpoint, by rank.
    pub fn iter(&self) -> impl Iterator<Item = (NodeId, &str)> + '_ {
        self.endpoints.iter().enumerate().map(|(i, e)| (NodeId(i as u16), &**e))
    }
}

impl fmt::Display for PeerTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} nodes, digest {:#018x}", self.world(), self.digest)?;
        if let Some(me) = self.me {
            write!(f, ", this node rank {me}")?;
        }
        Ok(())
    }
}

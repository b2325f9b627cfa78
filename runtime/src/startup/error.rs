//! Why a node could not start: its environment, its token or the rendezvous. Every message
//! names the variable, rank or value at fault.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use parma_core::NodeId;

use super::launch::{Launcher, Role};
use super::rendezvous::Refusals;

/// Why start-up failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum StartupError {
    /// No launcher's variables were found in the environment.
    NoLauncher,
    /// A launcher was recognized but one of the variables it needs is not set.
    MissingVar {
        /// The launcher recognized.
        launcher: Launcher,
        /// The variable missing.
        var: &'static str,
        /// What to set it to.
        hint: &'static str,
    },
    /// A variable (or an explicit value, named like the flag that gave it) cannot be used.
    BadVar {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// Neither `PARMA_TOKEN_FILE` nor `PARMA_TOKEN` is set.
    NoToken,
    /// Both `PARMA_TOKEN_FILE` and `PARMA_TOKEN` are set.
    TwoTokens,
    /// The token is empty.
    EmptyToken {
        /// Where it came from.
        from: String,
    },
    /// The token file cannot be read.
    TokenFile {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The token file is larger than a token can be.
    TokenFileTooLarge {
        /// The file.
        path: PathBuf,
        /// The largest file read.
        len_max: usize,
    },
    /// The token file may be read or written by group or others.
    TokenFileMode {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The endpoint this node would advertise cannot be sent.
    BadEndpoint {
        /// The endpoint.
        endpoint: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// This process is not a node: a ps-lite worker (nothing to do) or scheduler (runs the
    /// rendezvous only).
    NotANode {
        /// Its role.
        role: Role,
    },
    /// The rendezvous cannot listen on its address.
    Listen {
        /// The address.
        addr: String,
        /// Why.
        error: std::io::Error,
    },
    /// The rendezvous could not be reached before the timeout.
    Unreachable {
        /// Its address.
        addr: String,
        /// How long this node tried.
        waited: Duration,
        /// The last attempt's error.
        last: String,
    },
    /// The other end of the rendezvous does not prove the cluster token that this end holds.
    WrongToken {
        /// The rendezvous's address.
        addr: String,
    },
    /// The rendezvous sent something its protocol does not allow.
    Protocol {
        /// Its address.
        addr: String,
        /// What.
        what: &'static str,
    },
    /// The rendezvous speaks another version of its protocol.
    Version {
        /// Its address.
        addr: String,
        /// The rendezvous's version.
        theirs: u16,
        /// This node's version.
        ours: u16,
    },
    /// A node's configuration digest differs from the rendezvous's.
    DigestMismatch {
        /// The node (`None` if it asked to be assigned a rank).
        rank: Option<NodeId>,
        /// The node's digest.
        node: u64,
        /// The rendezvous's digest.
        rendezvous: u64,
    },
    /// A node's world size differs from the rendezvous's.
    WorldMismatch {
        /// The node (`None` if it asked to be assigned a rank).
        rank: Option<NodeId>,
        /// The node's world size.
        node: u16,
        /// The rendezvous's world size.
        rendezvous: u16,
    },
    /// A node claimed a rank outside the world.
    RankOutsideWorld {
        /// The rank claimed.
        rank: u16,
        /// The world size.
        world: u16,
    },
    /// Two live nodes claimed the same rank.
    DuplicateRank {
        /// The rank.
        rank: NodeId,
        /// The endpoint of the node that registered first.
        first: String,
        /// The endpoint of the second.
        second: String,
    },
    /// Some nodes gave their rank and others asked to be assigned one.
    MixedRanks,
    /// Not every node registered before the rendezvous's timeout.
    Missing {
        /// The world size.
        world: u16,
        /// The ranks missing (empty when ranks are assigned: then only the count is known).
        missing: Vec<NodeId>,
        /// How many nodes registered.
        registered: u16,
        /// How long the rendezvous waited.
        waited: Duration,
        /// Connections refused meanwhile.
        refusals: Refusals,
    },
    /// This node registered but the peer table did not come before its timeout.
    NoTable {
        /// The rendezvous's address.
        addr: String,
        /// How long this node waited in all.
        waited: Duration,
    },
    /// The rendezvous closed the connection before sending the peer table.
    Closed {
        /// Its address.
        addr: String,
    },
}

impl fmt::Display for StartupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use StartupError as E;
        match self {
            E::NoLauncher => f.write_str(
                "no launcher found in the environment: set PARMA_RANK, PARMA_WORLD_SIZE and \
                 PARMA_RENDEZVOUS=host:port, or start the nodes with `parma launch`, torchrun, \
                 Slurm's srun, mpirun or a ps-lite launcher",
            ),
            E::MissingVar { launcher, var, hint } => {
                write!(f, "{var} is not set (launched by {launcher}): {hint}")
            }
            E::BadVar { var, value, why } => write!(f, "{var}={value:?}: {why}"),
            E::NoToken => f.write_str(
                "no cluster token: set PARMA_TOKEN_FILE to a file that only you can read \
                 (chmod 600), or PARMA_TOKEN; every node needs the same token",
            ),
            E::TwoTokens => f.write_str("both PARMA_TOKEN_FILE and PARMA_TOKEN are set: set only one"),
            E::EmptyToken { from } => write!(f, "the cluster token from {from} is empty"),
            E::TokenFile { path, error } => {
                write!(f, "cannot read the token file {}: {error}", path.display())
            }
            E::TokenFileTooLarge { path, len_max } => {
                write!(f, "the token file {} is larger than {len_max} bytes", path.display())
            }
            E::TokenFileMode { path, mode } => write!(
                f,
                "the token file {0} may be read or written by group or others (mode {mode:04o}); it \
                 holds the cluster's secret: restrict it with `chmod 600 {0}`",
                path.display()
            ),
            E::BadEndpoint { endpoint, why } => write!(f, "advertised endpoint {endpoint:?}: {why}"),
            E::NotANode { role: Role::Scheduler } => {
                f.write_str("DMLC_ROLE=scheduler: this process runs the rendezvous only; it is not a node")
            }
            E::NotANode { .. } => f.write_str(
                "DMLC_ROLE=worker: parma runs its workers as threads inside every node \
                 (DMLC_ROLE=server), so a ps-lite worker process has nothing to do",
            ),
            E::Listen { addr, error } => write!(f, "cannot listen for the rendezvous on {addr}: {error}"),
            E::Unreachable { addr, waited, last } => write!(
                f,
                "the rendezvous at {addr} was not reachable within {:.1} s (last attempt: {last}); \
                 is rank 0 running, and is {addr} its address?",
                waited.as_secs_f64()
            ),
            E::WrongToken { addr } => write!(
                f,
                "the rendezvous at {addr} and this node hold different cluster tokens (check \
                 PARMA_TOKEN or PARMA_TOKEN_FILE on every node)"
            ),
            E::Protocol { addr, what } => {
                write!(f, "the rendezvous at {addr} broke the protocol ({what}): is it a parma rendezvous?")
            }
            E::Version { addr, theirs, ours } => write!(
                f,
                "the rendezvous at {addr} speaks protocol version {theirs}, this node {ours}: run the \
                 same parma on every node"
            ),
            E::DigestMismatch { rank, node, rendezvous } => write!(
                f,
                "configuration digest mismatch: {} has {node:#018x}, the rendezvous {rendezvous:#018x}; \
                 every node must run with the same configuration",
                Who(*rank)
            ),
            E::WorldMismatch { rank, node, rendezvous } => write!(
                f,
                "world size mismatch: {} counts {node} nodes, the rendezvous {rendezvous}",
                Who(*rank)
            ),
            E::RankOutsideWorld { rank, world } => {
                write!(
                    f,
                    "rank {rank} is outside the world of {world} nodes (ranks 0 to {})",
                    world.saturating_sub(1)
                )
            }
            E::DuplicateRank { rank, first, second } => {
                write!(f, "rank {rank} registered twice: first from {first}, then from {second}")
            }
            E::MixedRanks => f.write_str(
                "some nodes gave their rank and others asked to be assigned one: either every node \
                 of a world gives its rank or none does",
            ),
            E::Missing { world, missing, registered, waited, refusals } => {
                let secs = waited.as_secs_f64();
                if missing.is_empty() {
                    write!(f, "only {registered} of {world} nodes registered within {secs:.1} s")?;
                } else {
                    let ranks = if missing.len() == 1 { "rank" } else { "ranks" };
                    write!(f, "{ranks} {} of {world} did not register within {secs:.1} s", Ranks(missing))?;
                }
                if *refusals != Refusals::default() {
                    write!(f, "; connections refused meanwhile: {refusals}")?;
                }
                Ok(())
            }
            E::NoTable { addr, waited } => write!(
                f,
                "registered at the rendezvous {addr} but got no peer table within {:.1} s: not every \
                 node registered (the rendezvous's own error names the missing ranks)",
                waited.as_secs_f64()
            ),
            E::Closed { addr } => {
                write!(f, "the rendezvous at {addr} closed the connection before sending the peer table")
            }
        }
    }
}

impl std::error::Error for StartupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StartupError::TokenFile { error, .. } | StartupError::Listen { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// A node in a message: `rank 3`, or `a node without a rank`.
struct Who(Option<NodeId>);

impl fmt::Display for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(rank) => write!(f, "rank {rank}"),
            None => f.write_str("a node awaiting a rank"),
        }
    }
}

/// Sorted ranks as runs: `1, 3-5, 9`; at most 32 runs, then how many more ranks.
pub(crate) struct Ranks<'a>(pub(crate) &'a [NodeId]);

impl fmt::Display for Ranks<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const RUNS_MAX: usize = 32;
        let mut rest = self.0;
        let mut runs = 0;
        while let Some((first, _)) = rest.split_first() {
            let len =
                rest.iter().enumerate().take_while(|(i, r)| usize::from(r.0) == first.index() + i).count();
            if runs == RUNS_MAX {
                return write!(f, " and {} more", rest.len());
            }
            let sep = if runs == 0 { "" } else { ", " };
            match len {
                1 => write!(f, "{sep}{first}")?,
                _ => write!(f, "{sep}{first}-{}", rest[len - 1])?,
            }
            rest = &rest[len..];
            runs += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_print_as_runs() {
        let r = |v: &[u16]| Ranks(&v.iter().map(|&n| NodeId(n)).collect::<Vec<_>>()).to_string();
        assert_eq!(r(&[]), "");
        assert_eq!(r(&[3]), "3");
        assert_eq!(r(&[1, 3, 4, 5, 9]), "1, 3-5, 9");
        let many: Vec<u16> = (0..100).map(|i| i * 2).collect();
        assert!(r(&many).ends_with(" and 68 more"), "{}", r(&many));
    }
}

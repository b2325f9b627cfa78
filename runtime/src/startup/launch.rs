//! What a node learns from the launcher that started it: its rank, the world size and where
//! the rendezvous is. See the module docs of [`crate::startup`] for the variables read.

use std::fmt;

use parma_core::config::NODES_MAX;
use parma_core::NodeId;

use super::{hostlist, StartupError};

/// The rendezvous port under Slurm when `PARMA_RENDEZVOUS_PORT` is not set is
/// `SLURM_PORT_BASE + SLURM_JOB_ID % SLURM_PORT_SPREAD`, so that two jobs sharing a host
/// rarely pick the same one.
pub const SLURM_PORT_BASE: u16 = 29600;
/// See [`SLURM_PORT_BASE`].
pub const SLURM_PORT_SPREAD: u16 = 400;

/// The launcher whose variables a [`Launch`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Launcher {
    /// Given explicitly (command-line flags).
    Explicit,
    /// parma's own variables (`parma launch`, or set by hand).
    Parma,
    /// torchrun (PyTorch's elastic launcher).
    Torchrun,
    /// Slurm's `srun`.
    Slurm,
    /// Open MPI's `mpirun`.
    OpenMpi,
    /// MPICH's (or another PMI launcher's) `mpiexec`.
    Mpich,
    /// ps-lite's launchers (and those of Lapse, NuPS, AdaPM).
    PsLite,
}

impl Launcher {
    /// A short name for logs.
    pub fn name(self) -> &'static str {
        match self {
            Launcher::Explicit => "explicit flags",
            Launcher::Parma => "parma",
            Launcher::Torchrun => "torchrun",
            Launcher::Slurm => "slurm",
            Launcher::OpenMpi => "open-mpi",
            Launcher::Mpich => "mpich/pmi",
            Launcher::PsLite => "ps-lite",
        }
    }
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What this process does at start-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A parma node: registers at the rendezvous and gets the peer table (and runs the
    /// rendezvous too if it is rank 0). Every launcher but ps-lite; ps-lite's `server`.
    Node,
    /// Runs the rendezvous only, and exits once the peer table is out: ps-lite's
    /// `scheduler`. It is not one of the world's nodes.
    Scheduler,
    /// Nothing to do: ps-lite's `worker`. parma's workers are threads inside every node.
    Worker,
}

/// Where the rendezvous listens: a host (name or address) and a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RendezvousAddr {
    /// A host name, an IPv4 address or an IPv6 address (without brackets).
    pub host: String,
    /// A TCP port, not 0.
    pub port: u16,
}

impl RendezvousAddr {
    /// Reads `host:port`, `[ipv6]:port` or `ipv4:port`.
    pub fn parse(s: &str) -> Result<RendezvousAddr, String> {
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (host, port) = rest.split_once("]:").ok_or("an IPv6 address is written [addr]:port")?;
            (host, port)
        } else {
            let (host, port) = s.rsplit_once(':').ok_or("expected host:port")?;
            if host.contains(':') {
                return Err("an IPv6 address is written [addr]:port".into());
            }
            (host, port)
        };
        RendezvousAddr::new(host, port)
    }

    fn new(host: &str, port: &str) -> Result<RendezvousAddr, String> {
        if host.is_empty() || host.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) {
            return Err("the host is empty or holds spaces".into());
        }
        match port.parse::<u16>() {
            Ok(port) if port > 0 => Ok(RendezvousAddr { host: host.to_string(), port }),
            _ => Err(format!("the port `{port}` is not a number from 1 to 65535")),
        }
    }
}

impl fmt::Display for RendezvousAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// This process's place in the world, as its launcher told it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    launcher: Launcher,
    role: Role,
    rank: Option<NodeId>,
    world: u16,
    rendezvous: RendezvousAddr,
    advertised_host: Option<String>,
}

impl Launch {
    /// Rank, world and rendezvous given explicitly (e.g. by command-line flags); errors name
    /// the flags `--rank`, `--world-size` and `--rendezvous`.
    pub fn explicit(rank: NodeId, world: u16, rendezvous: &str) -> Result<Launch, StartupError> {
        let world = check_world("--world-size", &world.to_string())?;
        let rank = check_rank("--rank", &rank.to_string(), world)?;
        let rendezvous = parse_addr("--rendezvous", rendezvous)?;
        Ok(Launch {
            launcher: Launcher::Explicit,
            role: Role::Node,
            rank: Some(rank),
            world,
            rendezvous,
            advertised_host: None,
        })
    }

    /// The launch described by the environment that `get` reads; the first launcher whose
    /// variables are present wins, in this order: parma, torchrun, Slurm, Open MPI, MPICH/PMI,
    /// ps-lite. `PARMA_RENDEZVOUS`, when set, overrides the rendezvous of every launcher, and
    /// `PARMA_ADVERTISE_HOST` the advertised host. An empty variable counts as unset.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Launch, StartupError> {
        let env = Env(&get);
        let mut launch = if env.has("PARMA_RANK") || env.has("PARMA_WORLD_SIZE") {
            let world =
                check_world("PARMA_WORLD_SIZE", &env.need(Launcher::Parma, "PARMA_WORLD_SIZE", HINT_WORLD)?)?;
            let rank = check_rank("PARMA_RANK", &env.need(Launcher::Parma, "PARMA_RANK", HINT_RANK)?, world)?;
            let addr = env.need(Launcher::Parma, "PARMA_RENDEZVOUS", HINT_RENDEZVOUS)?;
            Launch::node(Launcher::Parma, rank, world, parse_addr("PARMA_RENDEZVOUS", &addr)?)
        } else if env.has("RANK") && env.has("WORLD_SIZE") {
            torchrun(&env)?
        } else if env.has("SLURM_PROCID") {
            slurm(&env)?
        } else if env.has("OMPI_COMM_WORLD_RANK") {
            mpi(&env, Launcher::OpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")?
        } else if env.has("PMI_RANK") {
            mpi(&env, Launcher::Mpich, "PMI_RANK", "PMI_SIZE")?
        } else if env.has("DMLC_ROLE") {
            ps_lite(&env)?
        } else {
            return Err(StartupError::NoLauncher);
        };
        if let Some(addr) = env.get("PARMA_RENDEZVOUS") {
            launch.rendezvous = parse_addr("PARMA_RENDEZVOUS", &addr)?;
        }
        if let Some(host) = env.get("PARMA_ADVERTISE_HOST") {
            launch.advertised_host = Some(host);
        }
        Ok(launch)
    }

    /// [`Launch::from_env`] on this process's environment.
    pub fn from_process_env() -> Result<Launch, StartupError> {
        Launch::from_env(|name| std::env::var(name).ok())
    }

    /// The same launch, advertising `host` (a hint for the transport's endpoint).
    pub fn with_advertised_host(mut self, host: impl Into<String>) -> Launch {
        self.advertised_host = Some(host.into());
        self
    }

    /// Which launcher's variables this came from.
    pub fn launcher(&self) -> Launcher {
        self.launcher
    }

    /// What this process does at start-up.
    pub fn role(&self) -> Role {
        self.role
    }

    /// This node's rank; `None` when the rendezvous assigns it (ps-lite), or for a scheduler
    /// or a ps-lite worker.
    pub fn rank(&self) -> Option<NodeId> {
        self.rank
    }

    /// The number of nodes, 1 to [`NODES_MAX`].
    pub fn world(&self) -> u16 {
        self.world
    }

    /// Where the rendezvous listens.
    pub fn rendezvous(&self) -> &RendezvousAddr {
        &self.rendezvous
    }

    /// The host this node should advertise to its peers, if the launcher said
    /// (`PARMA_ADVERTISE_HOST`, ps-lite's `DMLC_NODE_HOST`).
    pub fn advertised_host(&self) -> Option<&str> {
        self.advertised_host.as_deref()
    }

    fn node(launcher: Launcher, rank: NodeId, world: u16, rendezvous: RendezvousAddr) -> Launch {
        Launch { launcher, role: Role::Node, rank: Some(rank), world, rendezvous, advertised_host: None }
    }
}

impl fmt::Display for Launch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.role, self.rank) {
            (Role::Node, Some(rank)) => write!(f, "rank {rank} of {}", self.world)?,
            (Role::Node, None) => write!(f, "a node (rank assigned at the rendezvous) of {}", self.world)?,
            (Role::Scheduler, _) => write!(f, "the scheduler of {} nodes", self.world)?,
            (Role::Worker, _) => f.write_str("a ps-lite worker (nothing to do)")?,
        }
        write!(f, ", rendezvous {}, launched by {}", self.rendezvous, self.launcher)
    }
}

const HINT_WORLD: &str = "set it to the number of nodes";
const HINT_RANK: &str = "set it to this node's rank, 0 to the world size - 1";
const HINT_RENDEZVOUS: &str = "set it to rank 0's host and a free port, e.g. PARMA_RENDEZVOUS=node01:29600";

/// The environment, with empty values as unset.
struct Env<'a, F: Fn(&str) -> Option<String>>(&'a F);

impl<F: Fn(&str) -> Option<String>> Env<'_, F> {
    fn get(&self, name: &str) -> Option<String> {
        (self.0)(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
    }

    fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    fn need(
        &self,
        launcher: Launcher,
        var: &'static str,
        hint: &'static str,
    ) -> Result<String, StartupError> {
        self.get(var).ok_or(StartupError::MissingVar { launcher, var, hint })
    }
}

fn torchrun<F: Fn(&str) -> Option<String>>(env: &Env<'_, F>) -> Result<Launch, StartupError> {
    let l = Launcher::Torchrun;
    let world = check_world("WORLD_SIZE", &env.need(l, "WORLD_SIZE", HINT_WORLD)?)?;
    let rank = check_rank("RANK", &env.need(l, "RANK", HINT_RANK)?, world)?;
    let addr = match env.get("PARMA_RENDEZVOUS") {
        Some(addr) => parse_addr("PARMA_RENDEZVOUS", &addr)?,
        None => {
            let host = env.need(l, "MASTER_ADDR", "torchrun sets it; or set PARMA_RENDEZVOUS=host:port")?;
            let port = env.need(l, "MASTER_PORT", "torchrun sets it; or set PARMA_RENDEZVOUS=host:port")?;
            let bad = |why| StartupError::BadVar {
                var: "MASTER_ADDR/MASTER_PORT",
                value: format!("{host}:{port}"),
                why,
            };
            let torch = RendezvousAddr::new(&host, &port).map_err(bad)?;
            // torch.distributed's store (or torchrun's agent) holds MASTER_PORT itself: parma
            // meets at the next port, or at PARMA_RENDEZVOUS_PORT.
            let port = match env.get("PARMA_RENDEZVOUS_PORT") {
                Some(p) => check_port("PARMA_RENDEZVOUS_PORT", &p)?,
                None => torch.port.checked_add(1).ok_or_else(|| {
                    bad("MASTER_PORT is 65535, so parma's rendezvous has no next port: set PARMA_RENDEZVOUS_PORT".into())
                })?,
            };
            RendezvousAddr { host: torch.host, port }
        }
    };
    Ok(Launch::node(l, rank, world, addr))
}

fn slurm<F: Fn(&str) -> Option<String>>(env: &Env<'_, F>) -> Result<Launch, StartupError> {
    let l = Launcher::Slurm;
    let (world_var, world) = match env.get("SLURM_NTASKS") {
        Some(w) => ("SLURM_NTASKS", w),
        None => {
            let hint = "srun sets it for a job step: start the nodes with srun";
            (
                "SLURM_NPROCS",
                env.get("SLURM_NPROCS").ok_or(StartupError::MissingVar {
                    launcher: l,
                    var: "SLURM_NTASKS",
                    hint,
                })?,
            )
        }
    };
    let world = check_world(world_var, &world)?;
    let rank = check_rank("SLURM_PROCID", &env.need(l, "SLURM_PROCID", HINT_RANK)?, world)?;
    let addr = match env.get("PARMA_RENDEZVOUS") {
        Some(addr) => parse_addr("PARMA_RENDEZVOUS", &addr)?,
        None => {
            // Task 0 runs on the first host of the job step (block distribution), which is
            // the job's first host unless the step uses only some of them.
            let (var, list) = match env.get("SLURM_STEP_NODELIST") {
                Some(list) => ("SLURM_STEP_NODELIST", list),
                None => (
                    "SLURM_JOB_NODELIST",
                    env.need(l, "SLURM_JOB_NODELIST", "srun sets it; or set PARMA_RENDEZVOUS=host:port")?,
                ),
            };
            let host = hostlist::first(&list).map_err(|e| StartupError::BadVar {
                var,
                value: list.clone(),
                why: e.to_string(),
            })?;
            RendezvousAddr { host, port: slurm_port(env)? }
        }
    };
    Ok(Launch::node(l, rank, world, addr))
}

/// A port from 1 to 65535 in the variable `var`.
fn check_port(var: &'static str, p: &str) -> Result<u16, StartupError> {
    match p.parse::<u16>() {
        Ok(port) if port > 0 => Ok(port),
        _ => {
            Err(StartupError::BadVar { var, value: p.to_string(), why: "not a port from 1 to 65535".into() })
        }
    }
}

/// `PARMA_RENDEZVOUS_PORT`, or the default derived from `SLURM_JOB_ID`.
fn slurm_port<F: Fn(&str) -> Option<String>>(env: &Env<'_, F>) -> Result<u16, StartupError> {
    if let Some(p) = env.get("PARMA_RENDEZVOUS_PORT") {
        return check_port("PARMA_RENDEZVOUS_PORT", &p);
    }
    let job = env.get("SLURM_JOB_ID").and_then(|j| j.parse::<u64>().ok()).unwrap_or(0);
    // The remainder is below SLURM_PORT_SPREAD, so it fits a u16.
    Ok(SLURM_PORT_BASE + (job % u64::from(SLURM_PORT_SPREAD)) as u16)
}

fn mpi<F: Fn(&str) -> Option<String>>(
    env: &Env<'_, F>,
    l: Launcher,
    rank_var: &'static str,
    world_var: &'static str,
) -> Result<Launch, StartupError> {
    let world = check_world(
        world_var,
        &env.need(l, world_var, "the MPI launcher sets it; start the nodes with mpirun")?,
    )?;
    let rank = check_rank(rank_var, &env.need(l, rank_var, HINT_RANK)?, world)?;
    let hint =
        "MPI launchers give no rendezvous address: set PARMA_RENDEZVOUS to rank 0's host and a free port, \
                e.g. `mpirun -x PARMA_RENDEZVOUS=node01:29600 ...`";
    let addr = env.need(l, "PARMA_RENDEZVOUS", hint)?;
    Ok(Launch::node(l, rank, world, parse_addr("PARMA_RENDEZVOUS", &addr)?))
}

fn ps_lite<F: Fn(&str) -> Option<String>>(env: &Env<'_, F>) -> Result<Launch, StartupError> {
    let l = Launcher::PsLite;
    let role = match env.need(l, "DMLC_ROLE", "")?.as_str() {
        "server" => Role::Node,
        "scheduler" => Role::Scheduler,
        "worker" => Role::Worker,
        other => {
            let why = "expected server (a parma node), scheduler (the rendezvous) or worker (nothing to do)";
            return Err(StartupError::BadVar { var: "DMLC_ROLE", value: other.into(), why: why.into() });
        }
    };
    let world =
        check_world("DMLC_NUM_SERVER", &env.need(l, "DMLC_NUM_SERVER", "set it to the number of nodes")?)?;
    let addr = match env.get("PARMA_RENDEZVOUS") {
        Some(addr) => parse_addr("PARMA_RENDEZVOUS", &addr)?,
        None => {
            let host = env.need(l, "DMLC_PS_ROOT_URI", "set it to the scheduler's host")?;
            let port = env.need(l, "DMLC_PS_ROOT_PORT", "set it to the scheduler's port")?;
            RendezvousAddr::new(&host, &port).map_err(|why| StartupError::BadVar {
                var: "DMLC_PS_ROOT_URI/DMLC_PS_ROOT_PORT",
                value: format!("{host}:{port}"),
                why,
            })?
        }
    };
    let advertised_host = env.get("DMLC_NODE_HOST");
    Ok(Launch { launcher: l, role, rank: None, world, rendezvous: addr, advertised_host })
}

fn check_world(var: &'static str, value: &str) -> Result<u16, StartupError> {
    let bad = |why: String| StartupError::BadVar { var, value: value.to_string(), why };
    let n: u64 = value.trim().parse().map_err(|_| bad("not a number".into()))?;
    match u16::try_from(n) {
        Ok(w) if (1..=NODES_MAX).contains(&w) => Ok(w),
        _ => Err(bad(format!("the world size must be from 1 to {NODES_MAX}"))),
    }
}

fn check_rank(var: &'static str, value: &str, world: u16) -> Result<NodeId, StartupError> {
    let bad = |why: String| StartupError::BadVar { var, value: value.to_string(), why };
    let n: u64 = value.trim().parse().map_err(|_| bad("not a number".into()))?;
    match u16::try_from(n) {
        Ok(r) if r < world => Ok(NodeId(r)),
        _ => Err(bad(format!("the rank must be below the world size {world}"))),
    }
}

fn parse_addr(var: &'static str, value: &str) -> Result<RendezvousAddr, StartupError> {
    RendezvousAddr::parse(value).map_err(|why| StartupError::BadVar { var, value: value.to_string(), why })
}

#[cfg(test)]
#[path = "launch_tests.rs"]
mod tests;

//! `parma node`: its command-line arguments.

use std::time::Duration;

use clap::{Args, Subcommand};
use parma_cli::node::{run_node, NetOptions, NodeOptions, SumsOptions};
use parma_core::Technique;

/// Run one node of a cluster of processes over ZeroMQ (start it with `parma launch`, torchrun,
/// srun, mpirun or ps-lite's variables; the token comes from PARMA_TOKEN_FILE or PARMA_TOKEN):
/// the sums workload (Zipf-skewed pulls and pushes of 1, then every sum checked exactly), or,
/// with `train <task> ...`, a training task whose workers are spread over the processes.
#[derive(Args, Debug)]
pub struct NodeArgs {
    #[command(flatten)]
    net: NetArgs,
    #[command(flatten)]
    sums: SumsArgs,
    /// What the node runs instead of the sums workload.
    #[command(subcommand)]
    task: Option<NodeTask>,
}

/// What a node runs besides the sums workload.
#[derive(Subcommand, Debug)]
enum NodeTask {
    /// Train a model with one node per process: `parma node [node options] train kge --data
    /// umls ...` (the same task options on every node; `--workers` per node; rank 0 writes
    /// the initial model, evaluates and prints the report).
    #[command(subcommand)]
    Train(crate::train_cli::TrainCommand),
}

/// The sums workload's options (defaults in brackets); not with a training task.
#[derive(Args, Debug)]
struct SumsArgs {
    /// Worker threads of this node, the same on every node [2].
    #[arg(long)]
    workers: Option<u16>,
    /// Keys of the model [100000].
    #[arg(long)]
    keys: Option<u64>,
    /// f32 values per key [8].
    #[arg(long)]
    len: Option<u32>,
    /// Batches per worker [1000].
    #[arg(long)]
    batches: Option<u64>,
    /// Keys drawn per batch (duplicates are removed) [64].
    #[arg(long)]
    batch_keys: Option<usize>,
    /// Exponent of the Zipf law of key popularity (0 is uniform) [1.1].
    #[arg(long)]
    zipf: Option<f64>,
    /// Seed of every draw, the same on every node [1].
    #[arg(long)]
    seed: Option<u64>,
    /// How parameters are managed, the same on every node [adaptive].
    #[arg(long, value_parser = crate::parse_technique)]
    technique: Option<Technique>,
    /// Signal intent for (under relocation: localize) the keys of batch i+N while working on
    /// batch i [16].
    #[arg(long)]
    ahead: Option<u64>,
}

/// How a node process meets the others, and its transport (before `train`, if any).
#[derive(Args, Debug)]
struct NetArgs {
    /// This node's rank, instead of the launcher's environment (with --world and --rendezvous).
    #[arg(long, requires_all = ["world", "rendezvous"])]
    rank: Option<u16>,
    /// The number of nodes, instead of the launcher's environment.
    #[arg(long, requires_all = ["rank", "rendezvous"])]
    world: Option<u16>,
    /// host:port of the rendezvous (rank 0 listens there), instead of the environment.
    #[arg(long, requires_all = ["rank", "world"])]
    rendezvous: Option<String>,
    /// The transport: zmq, or rdma (a `parma` built with `--features rdma`; docs/deploy.md).
    #[arg(long, value_parser = parma_cli::node_transport::parse_node_transport, default_value = "zmq")]
    transport: parma_cli::node_transport::NodeTransport,
    /// Where the transport listens, tcp://host:port (rdma: host:port) (default: 127.0.0.1 with a free port when
    /// the rendezvous is on loopback, every address otherwise).
    #[arg(long)]
    bind: Option<String>,
    /// What peers connect to: tcp://host:port, host:port or host (containers, NAT; default:
    /// the address this machine reaches the rendezvous from).
    #[arg(long)]
    advertise: Option<String>,
    /// A peer silent this long has failed, in milliseconds (the same on every node).
    #[arg(long, default_value_t = 5000)]
    peer_timeout_ms: u64,
    /// Longest wait for every node at the rendezvous, in seconds.
    #[arg(long, default_value_t = 60)]
    startup_timeout_s: u64,
    /// Serve the node's counters in Prometheus's text format on host:port.
    #[arg(long)]
    metrics_addr: Option<String>,
}

impl NetArgs {
    fn options(&self) -> NetOptions {
        NetOptions {
            explicit: match (self.rank, self.world, &self.rendezvous) {
                (Some(r), Some(w), Some(a)) => Some((r, w, a.clone())),
                _ => None,
            },
            transport: self.transport,
            bind: self.bind.clone(),
            advertise: self.advertise.clone(),
            peer_timeout: Duration::from_millis(self.peer_timeout_ms),
            startup_timeout: Duration::from_secs(self.startup_timeout_s),
            metrics_addr: self.metrics_addr.clone(),
            job_digest: 0,
        }
    }
}

impl SumsArgs {
    fn options(&self) -> SumsOptions {
        let d = SumsOptions::default();
        SumsOptions {
            workers: self.workers.unwrap_or(d.workers),
            keys: self.keys.unwrap_or(d.keys),
            len: self.len.unwrap_or(d.len),
            batches: self.batches.unwrap_or(d.batches),
            batch_keys: self.batch_keys.unwrap_or(d.batch_keys),
            zipf: self.zipf.unwrap_or(d.zipf),
            seed: self.seed.unwrap_or(d.seed),
            technique: self.technique.unwrap_or(d.technique),
            ahead: self.ahead.unwrap_or(d.ahead),
        }
    }

    /// The sums options given on the command line, by name.
    fn given(&self) -> Vec<&'static str> {
        let all = [
            ("--workers", self.workers.is_some()),
            ("--keys", self.keys.is_some()),
            ("--len", self.len.is_some()),
            ("--batches", self.batches.is_some()),
            ("--batch-keys", self.batch_keys.is_some()),
            ("--zipf", self.zipf.is_some()),
            ("--seed", self.seed.is_some()),
            ("--technique", self.technique.is_some()),
            ("--ahead", self.ahead.is_some()),
        ];
        all.into_iter().filter(|(_, g)| *g).map(|(n, _)| n).collect()
    }
}

/// Runs the node; prints its report.
pub fn run(args: &NodeArgs) -> Result<(), String> {
    let net = args.net.options();
    if let Some(NodeTask::Train(cmd)) = &args.task {
        let given = args.sums.given();
        if !given.is_empty() {
            return Err(format!(
                "bad options: {} belong to the sums workload; a training task takes its own options \
                 after `train <task>` (e.g. `parma node train kge --workers 1 ...`)",
                given.join(", ")
            ));
        }
        return crate::train_cli::run_node(cmd, &net);
    }
    let opts = NodeOptions { sums: args.sums.options(), net };
    match run_node(&opts).map_err(|e| e.to_string())? {
        Some(report) => println!("{report}"),
        None => println!("not a node (ps-lite scheduler or worker): nothing more to do"),
    }
    Ok(())
}

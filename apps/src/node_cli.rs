//! `parma node`: its command-line arguments.

use std::time::Duration;

use clap::Args;
use parma_apps::node::{run_node, NodeOptions, SumsOptions};
use parma_core::Technique;

/// Run one node of a cluster of processes over ZeroMQ (start it with `parma launch`, torchrun,
/// srun, mpirun or ps-lite's variables; the token comes from PARMA_TOKEN_FILE or PARMA_TOKEN)
/// and the sums workload: Zipf-skewed pulls and pushes of 1, then every sum checked exactly.
#[derive(Args, Debug)]
pub struct NodeArgs {
    /// Worker threads of this node (the same on every node).
    #[arg(long, default_value_t = 2)]
    workers: u16,
    /// Keys of the model.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// f32 values per key.
    #[arg(long, default_value_t = 8)]
    len: u32,
    /// Batches per worker.
    #[arg(long, default_value_t = 1000)]
    batches: u64,
    /// Keys drawn per batch (duplicates are removed).
    #[arg(long, default_value_t = 64)]
    batch_keys: usize,
    /// Exponent of the Zipf law of key popularity (0 is uniform).
    #[arg(long, default_value_t = 1.1)]
    zipf: f64,
    /// Seed of every draw (the same on every node).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How parameters are managed (the same on every node).
    #[arg(long, value_parser = crate::parse_technique, default_value = "adaptive")]
    technique: Technique,
    /// Signal intent for (under relocation: localize) the keys of batch i+N while working on
    /// batch i.
    #[arg(long, default_value_t = 16)]
    ahead: u64,
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
    #[arg(long, value_parser = parma_apps::node_transport::parse_node_transport, default_value = "zmq")]
    transport: parma_apps::node_transport::NodeTransport,
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

impl NodeArgs {
    fn options(&self) -> NodeOptions {
        NodeOptions {
            sums: SumsOptions {
                workers: self.workers,
                keys: self.keys,
                len: self.len,
                batches: self.batches,
                batch_keys: self.batch_keys,
                zipf: self.zipf,
                seed: self.seed,
                technique: self.technique,
                ahead: self.ahead,
            },
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
        }
    }
}

/// Runs the node; prints its report.
pub fn run(args: &NodeArgs) -> Result<(), String> {
    match run_node(&args.options()).map_err(|e| e.to_string())? {
        Some(report) => println!("{report}"),
        None => println!("not a node (ps-lite scheduler or worker): nothing more to do"),
    }
    Ok(())
}

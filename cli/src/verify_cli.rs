//! `parma sim`, `parma conformance` and the hidden `parma conformance-agent`: their
//! options and what they run ([`parma_cli::verify`], [`parma_cli::conformance_zmq`]).

use std::process::ExitCode;

use clap::Args;
use parma_cli::verify;
use parma_core::{Gate, Technique};

use crate::{parse_gate, parse_technique};

/// The agent's transport.
#[derive(clap::Args, Debug)]
pub(crate) struct ConformanceAgentArgs {
    /// zmq (the `zmq-processes` transport), or rdma (a `parma` built with `--features rdma`).
    #[arg(long, value_parser = parma_cli::node_transport::parse_node_transport, default_value = "zmq")]
    pub(crate) transport: parma_cli::node_transport::NodeTransport,
}

#[derive(Args, Debug)]
pub(crate) struct SimArgs {
    /// Seeds to run per technique.
    #[arg(long, default_value_t = 1000)]
    pub(crate) seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    pub(crate) first: u64,
    /// One technique by name (default: every technique).
    #[arg(long, value_parser = parse_technique)]
    pub(crate) technique: Option<Technique>,
    /// The clock gate: async, bsp, ssp:S, bounded-delay:T or sparse-ssp:S:P. Under any but async, workers
    /// wait at the gate after every operation and every read is checked against its bound.
    #[arg(long, value_parser = parse_gate, default_value = "async")]
    pub(crate) gate: Gate,
    /// Threads (default: the machine's parallelism).
    #[arg(long)]
    pub(crate) threads: Option<usize>,
    /// Run every seed a second time in another process (a fresh `parma`) and require the same
    /// fingerprint: the frames delivered, and every transmit, worker completion and peer
    /// failure in the order the nodes gave them.
    #[arg(long)]
    pub(crate) determinism: bool,
    /// Print each seed's fingerprint (`fingerprint <technique> <seed> ...`), as the second
    /// process of `--determinism` does.
    #[arg(long)]
    pub(crate) fingerprints: bool,
}

#[derive(Args, Debug)]
pub(crate) struct ConformanceArgs {
    /// Transports: sim, threaded, threaded-1frame, zmq, zmq-processes (default: all).
    #[arg(long, value_delimiter = ',')]
    pub(crate) transport: Vec<String>,
    /// Fault seeds of the simulated network (each trace runs once per seed).
    #[arg(long, default_value_t = 32)]
    pub(crate) seeds: u64,
    /// Directory of `.trace` files (default: the suite shipped with parma).
    #[arg(long)]
    pub(crate) traces: Option<std::path::PathBuf>,
    /// Rewrite the expected outputs of traces that differ (review the diff afterwards).
    #[arg(long)]
    pub(crate) rewrite: bool,
}

pub(crate) fn run_sim(args: &SimArgs) -> bool {
    let techniques: Vec<Technique> = args.technique.map_or(Technique::ALL.to_vec(), |t| vec![t]);
    let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut rows = verify::sim(&techniques, args.gate, args.first, args.seeds, threads);
    if args.fingerprints {
        for (_, r) in &rows {
            r.fingerprints.values().for_each(|f| println!("fingerprint {f}"));
        }
    }
    if args.determinism {
        let compared = std::env::current_exe()
            .map_err(|e| format!("cannot find the parma executable: {e}"))
            .and_then(|exe| {
                verify::compare_with_process(&exe, args.gate, args.first, args.seeds, threads, &mut rows)
            });
        if let Err(e) = compared {
            eprintln!("parma: the determinism check did not run: {e}");
            return false;
        }
    }
    println!("{}", verify::sim_table(args.first, args.seeds, &rows));
    rows.iter().all(|(_, r)| r.failed == 0 && r.nondeterministic == 0)
}

pub(crate) fn run_conformance(args: &ConformanceArgs) -> Result<bool, String> {
    let transports: Vec<String> = if args.transport.is_empty() {
        parma_conformance::suite::TRANSPORTS.iter().map(|s| s.to_string()).collect()
    } else {
        args.transport.clone()
    };
    let dir = args.traces.clone().unwrap_or_else(parma_conformance::suite::default_dir);
    verify::conformance(&transports, &dir, args.seeds, args.rewrite)
}

pub(crate) fn conformance_agent(args: &ConformanceAgentArgs) -> ExitCode {
    use parma_cli::node_transport::{start_agent_node_rdma, NodeTransport};
    use parma_conformance::process::agent;
    let (input, output) = (std::io::stdin().lock(), std::io::stdout().lock());
    let served = match args.transport {
        NodeTransport::Zmq => {
            agent::serve_with(input, output, &mut parma_cli::conformance_zmq::start_agent_node)
        }
        NodeTransport::Rdma => agent::serve_with(input, output, &mut start_agent_node_rdma),
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("parma conformance-agent: {e}");
            ExitCode::FAILURE
        }
    }
}

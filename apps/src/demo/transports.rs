//! The transports the demo's in-process cluster runs on: the threaded loopback (the default),
//! or ZeroMQ over TCP on 127.0.0.1, every node's transport in this process with an I/O thread
//! of its own. The demo starts the same nodes on either and reads the same counters; over
//! ZeroMQ it also reads the bytes the transport put on the wire.

use std::fmt;
use std::sync::Arc;

use parma_core::{Config, NodeId};
use parma_runtime::startup::ClusterToken;
use parma_runtime::{NodeRuntime, Options, Worker};
use parma_transport_loopback::threaded::{cluster, ThreadedOptions};
use parma_transport_zmq::{local_cluster, ZmqOptions};

use super::{fmt_bytes, DemoError, DemoReport};

/// Which transport carries the demo's frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DemoTransport {
    /// The threaded loopback: frames move between threads through queues in memory.
    #[default]
    Threaded,
    /// ZeroMQ over TCP on 127.0.0.1 (`parma-transport-zmq`), every node in this process.
    Zmq,
}

impl DemoTransport {
    /// Every transport, in the order of the CLI's help.
    pub const ALL: [DemoTransport; 2] = [DemoTransport::Threaded, DemoTransport::Zmq];

    /// The name `--transport` takes.
    pub fn name(self) -> &'static str {
        match self {
            DemoTransport::Threaded => "threaded",
            DemoTransport::Zmq => "zmq",
        }
    }

    /// The transport called `name`.
    pub fn from_name(name: &str) -> Option<DemoTransport> {
        DemoTransport::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The transport called `name`, or an error that lists the names (for `--transport`).
    pub fn parse(name: &str) -> Result<DemoTransport, String> {
        DemoTransport::from_name(name).ok_or_else(|| {
            let names: Vec<&str> = DemoTransport::ALL.iter().map(|t| t.name()).collect();
            format!("unknown transport `{name}`; one of: {}", names.join(", "))
        })
    }
}

impl fmt::Display for DemoTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A markdown table of the same workload on several transports: `rounds[r]` holds round
/// `r`'s runs, one per transport in the same order every round. Every column is the median over
/// the rounds; the ratio is each round's wall time over the first transport's in that round.
pub fn transport_comparison(rounds: &[Vec<DemoReport>]) -> String {
    let mut out = String::from(
        "| transport | wall | batches/s | messages | bytes sent | bytes on the wire | \
         wall / first (per round) |\n| --- | --- | --- | --- | --- | --- | --- |\n",
    );
    let Some(first) = rounds.first() else { return out };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    for (i, r) in first.iter().enumerate() {
        let runs: Vec<&DemoReport> = rounds.iter().filter_map(|round| round.get(i)).collect();
        let of = |f: &dyn Fn(&DemoReport) -> f64| median(runs.iter().map(|r| f(r)).collect());
        let ratios: Vec<f64> = rounds
            .iter()
            .filter_map(|round| Some(round.get(i)?.wall.as_secs_f64() / round.first()?.wall.as_secs_f64()))
            .collect();
        let (lo, hi) = ratios.iter().fold((f64::INFINITY, 0f64), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
        let wire = r.wire_bytes_sent.map(|_| of(&|r| r.wire_bytes_sent.unwrap_or(0) as f64) as u64);
        out.push_str(&format!(
            "| {} | {:.2} s | {:.0} | {:.0} | {} | {} | {:.2}x ({:.2}-{:.2}) |\n",
            r.options.transport,
            of(&|r| r.wall.as_secs_f64()),
            of(&|r| r.batches as f64 / r.wall.as_secs_f64().max(1e-9)),
            of(&|r| r.messages_sent as f64),
            fmt_bytes(of(&|r| r.bytes_sent as f64) as u64),
            wire.map_or("-".to_string(), fmt_bytes),
            median(ratios),
            lo,
            hi,
        ));
    }
    out
}

/// Starts the cluster's nodes on `transport`, with `cfg` and `ropts`: the nodes and every
/// node's workers. The transport's counters (bytes on the wire) come with each node's
/// `Stats::transport`.
pub(crate) fn start_nodes(
    transport: DemoTransport,
    cfg: &Config,
    ropts: &Options,
) -> Result<(Vec<NodeRuntime>, Vec<Worker>), DemoError> {
    match transport {
        DemoTransport::Threaded => start_all(cluster(cfg.nodes, ThreadedOptions::default()), |i, t| {
            NodeRuntime::start_with(cfg.clone(), NodeId(i as u16), t, ropts.clone())
        }),
        DemoTransport::Zmq => {
            let digest = parma_core::cluster_digest(cfg, 0, None);
            let token = Arc::new(ClusterToken::generate());
            let ts = local_cluster(cfg.nodes, &ZmqOptions::loopback(), digest, token)
                .map_err(|e| DemoError::Transport(e.to_string()))?;
            // Each node's driver on its transport's I/O thread.
            start_all(ts, |_, t| t.start_node(cfg.clone(), ropts.clone()))
        }
    }
}

/// Starts node `i` on `transports[i]` with `start`.
fn start_all<T>(
    transports: Vec<T>,
    start: impl Fn(usize, T) -> Result<(NodeRuntime, Vec<Worker>), parma_runtime::Error>,
) -> Result<(Vec<NodeRuntime>, Vec<Worker>), DemoError> {
    // Declared before the workers, so that on an early return the workers are dropped first.
    let mut nodes = Vec::new();
    let mut workers = Vec::new();
    for (i, t) in transports.into_iter().enumerate() {
        let (node, handles) = start(i, t).map_err(DemoError::Start)?;
        nodes.push(node);
        workers.extend(handles);
    }
    Ok((nodes, workers))
}

//! The suite over ZeroMQ in this process, and the agent's node over ZeroMQ.

use std::path::Path;

use parma_conformance::process::agent::STARTUP_TIMEOUT;
use parma_conformance::suite::{self, default_skip_list, run_suite, TraceResult};
use parma_conformance::trace::{Executor, HostedNode, RuntimeExecutor, Setup};
use parma_core::Config;
use parma_runtime::startup::{connect, ClusterToken, Launch};
use parma_transport_zmq::Bound;

use super::{cluster, options};

/// Runs the suite in `dir` on the transport called `transport` (one of
/// [`suite::TRANSPORTS`]) with its shipped skip list: `zmq` here, every other one by
/// [`suite::run_transport`].
pub fn run_transport(
    transport: &str,
    dir: &Path,
    seeds: std::ops::Range<u64>,
    rewrite: bool,
) -> Result<Vec<TraceResult>, String> {
    if transport == "zmq" {
        run_zmq(dir, rewrite)
    } else {
        suite::run_transport(transport, dir, seeds, rewrite)
    }
}

/// Runs the suite in `dir` on ZeroMQ over TCP on 127.0.0.1, every node in this process, with
/// the `zmq` skip list.
pub fn run_zmq(dir: &Path, rewrite: bool) -> Result<Vec<TraceResult>, String> {
    let skips = default_skip_list("zmq")?;
    let mut make = |s: &Setup| -> Result<Box<dyn Executor>, String> {
        let ends = cluster(s)?;
        let switches: Vec<_> = ends.iter().map(|e| e.kill_switch()).collect();
        // Each node's driver on its transport's I/O thread, as parma's commands run it.
        let ends = ends
            .into_iter()
            .map(|mut t| t.driver_host().map(|h| (t, h)).ok_or("a transport without its host"))
            .collect::<Result<Vec<_>, _>>()?;
        let exec = RuntimeExecutor::new_hosted(s, ends)?;
        Ok(Box::new(exec.with_kill(move |n| {
            if let Some(k) = switches.get(n.index()) {
                k.kill();
            }
        })))
    };
    run_suite(dir, &skips, &mut make, rewrite)
}

/// An agent's node over ZeroMQ on 127.0.0.1 with the suite's timers ([`options`]): what
/// `parma conformance-agent` passes to `parma_conformance::process::agent::serve_with`.
pub fn start_agent_node(
    launch: &Launch,
    cfg: Config,
    digest: u64,
    token: ClusterToken,
) -> Result<HostedNode, String> {
    let bound = Bound::bind(options()).map_err(|e| e.to_string())?;
    let (me, mut transport) = connect(launch, bound, digest, token, STARTUP_TIMEOUT)
        .map_err(|e| e.to_string())?
        .ok_or("the start-up made this agent no node")?;
    let host = transport.driver_host().ok_or("a transport without its host")?;
    HostedNode::start_on(cfg, me, transport, host)
}

//! The agent: one node of a trace's cluster in its own process, serving the process
//! executor's calls on its stdin and stdout.

use std::io::{BufRead, Write};
use std::time::Duration;

use parma_core::{Clock, Config, DistId, NodeId, SampleHandle, WorkerId};
use parma_runtime::startup::{ClusterToken, Launch};

use super::wire::{
    from_bits, key_numbers, level_named, read_line, to_bits, to_keys, Reply, Request, Response, WireError,
    WireSetup,
};
use crate::trace::{GatedSteps, HostedNode};

/// Longest wait at the rendezvous for the other agents.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);

/// Starts an agent's node on some transport: the launch, the trace's configuration, its
/// digest and the cluster token in; the node out. This crate names no transport: the `parma`
/// binary passes its ZeroMQ one (or its RDMA one) to [`serve_with`].
pub type StartNode<'a> = dyn FnMut(&Launch, Config, u64, ClusterToken) -> Result<HostedNode, String> + 'a;

/// Runs one agent: reads the trace's setup (the first line of `input`), meets the other
/// agents (rank, world size, rendezvous and token from the environment, as `parma launch`
/// sets them), starts its node with `start_node` (the `parma` binary's: over ZeroMQ on
/// 127.0.0.1 with the suite's timers, `parma_cli::conformance_zmq::start_agent_node`, or
/// over RDMA), answers `Ready`, then one response per request until `Shutdown` (the node
/// shuts down cleanly) or the end of `input` (the executor is gone: the node stops at once).
/// Errs if the node could not start (after answering why) or a line could not be read or
/// written.
pub fn serve_with(
    mut input: impl BufRead,
    mut output: impl Write,
    start_node: &mut StartNode<'_>,
) -> Result<(), String> {
    let mut node = match start(&mut input, start_node) {
        Ok((node, setup)) => {
            answer(&mut output, &Ok(Reply::Ready { setup }))?;
            node
        }
        Err(why) => {
            answer(&mut output, &Err(WireError::Agent(why.clone())))?;
            return Err(why);
        }
    };
    loop {
        let Some(line) = read_line(&mut input)? else { return Ok(()) };
        let request: Request = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                answer(
                    &mut output,
                    &Err(WireError::Agent(format!("a request this agent cannot read: {e}"))),
                )?;
                continue;
            }
        };
        if let Request::Shutdown = request {
            let r = node.shutdown().map(|()| Reply::Done).map_err(WireError::Agent);
            return answer(&mut output, &r);
        }
        answer(&mut output, &call(&mut node, request))?;
    }
}

/// Reads the setup and starts the node; returns it with the setup as understood here.
fn start(
    input: &mut impl BufRead,
    start_node: &mut StartNode<'_>,
) -> Result<(HostedNode, WireSetup), String> {
    let line = read_line(input)?.ok_or("the input ended before the setup")?;
    let wire: WireSetup =
        serde_json::from_str(&line).map_err(|e| format!("a setup this agent cannot read: {e}"))?;
    let setup = wire.to_setup()?;
    let launch = Launch::from_process_env().map_err(|e| e.to_string())?;
    if launch.world() != setup.nodes {
        return Err(format!("a world of {} for a cluster of {} nodes", launch.world(), setup.nodes));
    }
    let token = ClusterToken::from_process_env().map_err(|e| e.to_string())?;
    let cfg = setup.config();
    let digest = parma_core::cluster_digest(&cfg, 0, None);
    let node = start_node(&launch, cfg, digest, token)?;
    Ok((node, WireSetup::from_setup(&setup)?))
}

fn answer(output: &mut impl Write, r: &Response) -> Result<(), String> {
    let line = serde_json::to_string(r).map_err(|e| format!("cannot encode a response: {e}"))?;
    writeln!(output, "{line}").and_then(|()| output.flush()).map_err(|e| format!("cannot answer: {e}"))
}

/// Runs one request on the node.
fn call(node: &mut HostedNode, request: Request) -> Response {
    let w = WorkerId;
    Ok(match request {
        Request::Pull { worker, keys } => {
            let (vals, local) = node.pull(w(worker), &to_keys(&keys))?;
            Reply::Pulled { val_bits: to_bits(&vals), local }
        }
        Request::Write { worker, set, keys, val_bits } => {
            node.write(w(worker), set, &to_keys(&keys), &from_bits(&val_bits))?;
            Reply::Done
        }
        Request::Localize { worker, keys } => {
            node.localize(w(worker), &to_keys(&keys))?;
            Reply::Done
        }
        Request::Look { key } => {
            let key = parma_core::Key(key);
            Reply::Look { holds: node.holds(key), replica: node.has_replica(key) }
        }
        Request::Intent { worker, keys, start, end } => {
            node.intent(w(worker), &to_keys(&keys), Clock(start), Clock(end))?;
            Reply::Done
        }
        Request::Advance { worker, by } => Reply::Clock { clock: node.advance(w(worker), by)?.0 },
        Request::WaitSync { worker } => {
            node.wait_sync(w(worker))?;
            Reply::Done
        }
        Request::ConcurrentPush { keys, rounds, each_bits } => {
            node.concurrent_push(&to_keys(&keys), rounds, f32::from_bits(each_bits))?;
            Reply::Done
        }
        Request::GatedSteps { keys, steps, each_bits, slow } => {
            let spec = GatedSteps {
                keys: to_keys(&keys),
                steps,
                each: f32::from_bits(each_bits),
                slow: slow.map(|(n, w)| (NodeId(n), WorkerId(w))),
            };
            Reply::Steps(node.gated_steps(&spec).map(|sums| to_bits(&sums)))
        }
        Request::Register { dist, level } => {
            let id = node.register(&dist.to_dist()?, level_named(&level)?)?;
            Reply::Dist { id: id.0 }
        }
        Request::PrepareSample { worker, dist, n, start, end } => {
            let h = node.prepare_sample(w(worker), DistId(dist), n, (Clock(start), Clock(end)))?;
            Reply::Handle { handle: h.0 }
        }
        Request::PullSample { worker, handle, count } => {
            let (keys, vals, local) = node.pull_sample(w(worker), SampleHandle(handle), count)?;
            Reply::Sampled { keys: key_numbers(&keys), val_bits: to_bits(&vals), local }
        }
        Request::FinishSample { worker, handle } => {
            node.finish_sample(w(worker), SampleHandle(handle))?;
            Reply::Done
        }
        Request::SamplingStats { worker } => Reply::Sampling(node.sampling_stats(w(worker))?.into()),
        Request::Counters => {
            Reply::Counters { keys_forwarded: node.keys_forwarded(), peers_failed: node.peers_failed() }
        }
        Request::Checkpoint { op, dir } => Reply::Checkpoint(node.checkpoint(op, std::path::Path::new(&dir))),
        Request::Barrier => {
            Reply::Workers(node.barrier().into_iter().map(|(_, _, r)| r.map_err(Into::into)).collect())
        }
        Request::Finalize => {
            Reply::Workers(node.finalize().into_iter().map(|r| r.map_err(Into::into)).collect())
        }
        // Handled by `serve`, which owns the node.
        Request::Shutdown => {
            return Err(WireError::Agent(format!("node {} cannot shut down here", node.id().0)))
        }
    })
}

//! The process executor: every trace call sent to the agent of the node it concerns.

use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration as StdDuration, Instant};

use parma_core::sampling::SamplingStats;
use parma_core::{
    Clock, Conformity, DistId, Distribution, Duration, Key, NodeId, OpError, SampleHandle, WorkerId,
};
use parma_runtime::startup::ClusterToken;

use super::child::{AgentProcess, EXIT_WAIT};
use super::wire::{from_bits, key_numbers, to_bits, to_keys, Reply, Request, WireDist, WireError, WireSetup};
use super::AgentCommand;
use crate::trace::runtime_exec::{finalized, settle_with, KILL_WAIT};
use crate::trace::{
    gated, BarrierOut, CheckpointOp, Executor, GatedSteps, SampleOut, Setup, BARRIER_TIMEOUT,
};

/// Longest wait for one call's answer: longer than the longest call an agent makes (a
/// barrier), so that a late answer means a stuck agent.
const CALL_TIMEOUT: StdDuration = StdDuration::from_secs(BARRIER_TIMEOUT.as_secs() + 30);
/// Longest wait for every agent to be up (the agents' rendezvous waits 20 s).
const START_TIMEOUT: StdDuration = StdDuration::from_secs(30);
/// Pause between two rounds of questions while a `kill` waits.
const KILL_POLL: StdDuration = StdDuration::from_millis(10);

/// A trace executor on a cluster of agent processes on 127.0.0.1, one per node, over ZeroMQ.
///
/// Every call goes to the agent of its node as one line, and the executor waits for the
/// answer (90 s at most). A call that needs every node at once (`barrier`,
/// `concurrent-push`, finalizing) goes to every agent first and is then answered by each; a
/// question about every node (`owners`, `placement`, the counters) is asked of each. `kill`
/// is SIGKILL. An agent that misbehaves (no answer in time, a line that does not parse, an
/// early exit) is stopped, its calls end with an error, and the trace fails at its end with
/// what went wrong and the agent's last lines on stderr. Every agent still running is killed
/// and reaped when the executor is dropped.
pub struct ProcessExecutor {
    setup: Setup,
    hold: Duration,
    /// Per node: its agent, `None` once killed or broken.
    agents: Vec<Option<AgentProcess>>,
    /// Per node: stopped by `kill`.
    killed: Vec<bool>,
    /// Keys the killed nodes had forwarded when they were killed.
    forwarded_by_killed: u64,
    /// What went wrong with the agents, reported by `finish`.
    trouble: Vec<String>,
}

impl ProcessExecutor {
    /// Starts one agent per node of `setup` with `agent`, each told its rank, the world size,
    /// a rendezvous on a free port of 127.0.0.1 and a fresh cluster token (in its
    /// environment, as `parma launch` does), and waits until every one is up.
    pub fn start(setup: &Setup, agent: &AgentCommand) -> Result<ProcessExecutor, String> {
        let wire = WireSetup::from_setup(setup)?;
        let line = serde_json::to_string(&wire).map_err(|e| format!("cannot encode the setup: {e}"))?;
        // Free now, outside the ephemeral range; rank 0 binds it a moment later.
        let port = parma_runtime::startup::free_rendezvous_port([127, 0, 0, 1].into())
            .map_err(|e| format!("cannot pick a free port: {e}"))?;
        let token = ClusterToken::generate();
        let mut exec = ProcessExecutor {
            setup: setup.clone(),
            hold: setup.config().relocation_hold,
            agents: Vec::new(),
            killed: vec![false; usize::from(setup.nodes)],
            forwarded_by_killed: 0,
            trouble: Vec::new(),
        };
        for rank in 0..setup.nodes {
            let mut cmd = Command::new(&agent.program);
            cmd.args(&agent.args)
                .env("PARMA_RANK", rank.to_string())
                .env("PARMA_WORLD_SIZE", setup.nodes.to_string())
                .env("PARMA_RENDEZVOUS", format!("127.0.0.1:{port}"));
            token.export(&mut cmd);
            let mut a = AgentProcess::spawn(NodeId(rank), cmd)?;
            a.send_line(&line)?;
            exec.agents.push(Some(a));
        }
        let deadline = Instant::now() + START_TIMEOUT;
        for a in exec.agents.iter_mut().flatten() {
            match a.recv(deadline)? {
                Ok(Reply::Ready { setup }) if setup == wire => {}
                Ok(Reply::Ready { setup }) => {
                    return Err(a.trouble(&format!("understood the setup as {setup:?}, not {wire:?}")))
                }
                Ok(other) => return Err(a.trouble(&format!("answered {other:?} instead of Ready"))),
                Err(WireError::Agent(why)) => return Err(a.trouble(&format!("did not start: {why}"))),
                Err(e) => return Err(a.trouble(&format!("did not start: {e:?}"))),
            }
        }
        Ok(exec)
    }

    /// Records `what` for `finish`, and stops the agent of `node` (it is in an unknown state).
    fn broken(&mut self, node: NodeId, what: String) {
        if let Some(slot) = self.agents.get_mut(node.index()) {
            *slot = None;
        }
        self.trouble.push(what);
    }

    /// The agent of `node`, or the error a call on it ends with.
    fn agent(&mut self, node: NodeId) -> Result<&mut AgentProcess, OpError> {
        match (self.agents.get_mut(node.index()), self.killed.get(node.index())) {
            (None, _) => Err(OpError::InvalidArgument),
            (_, Some(true)) => Err(OpError::Closed),
            (Some(a), _) => a.as_mut().ok_or(OpError::Closed),
        }
    }

    /// Sends `request` to the agent of `node` and waits for its reply.
    fn call(&mut self, node: NodeId, request: &Request) -> Result<Reply, OpError> {
        let deadline = Instant::now() + CALL_TIMEOUT;
        let agent = self.agent(node)?;
        let answer = agent.send(request).and_then(|()| agent.recv(deadline));
        self.settle_reply(node, answer)
    }

    /// Sends `request` to every running agent, then collects their replies, in node order.
    fn broadcast(&mut self, request: &Request) -> Vec<(NodeId, Result<Reply, OpError>)> {
        let deadline = Instant::now() + CALL_TIMEOUT;
        // An agent that broke before is not asked again: its calls end with `Closed`.
        let sent: Vec<(NodeId, Option<Result<(), String>>)> =
            self.running().into_iter().map(|n| (n, self.agent(n).ok().map(|a| a.send(request)))).collect();
        sent.into_iter()
            .map(|(n, sent)| {
                let Some(sent) = sent else { return (n, Err(OpError::Closed)) };
                let answer = sent.and_then(|()| match self.agent(n) {
                    Ok(a) => a.recv(deadline),
                    Err(e) => Err(format!("the agent of node {}: {e}", n.0)),
                });
                (n, self.settle_reply(n, answer))
            })
            .collect()
    }

    /// A reply as the executor returns it: an agent's trouble breaks it, an error the
    /// executor cannot name fails the trace.
    fn settle_reply(
        &mut self,
        node: NodeId,
        answer: Result<super::wire::Response, String>,
    ) -> Result<Reply, OpError> {
        match answer {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => match e.to_op() {
                Ok(op) => Err(op),
                Err(what) => {
                    self.trouble.push(format!("the agent of node {}: {what}", node.0));
                    Err(OpError::InvalidArgument)
                }
            },
            Err(what) => {
                self.broken(node, what);
                Err(OpError::Closed)
            }
        }
    }

    /// A reply of an unexpected kind: a bug on one side, which fails the trace.
    fn unexpected<T>(&mut self, node: NodeId, reply: Reply) -> Result<T, OpError> {
        self.trouble
            .push(format!("the agent of node {} answered {reply:?}, which does not fit the call", node.0));
        Err(OpError::InvalidArgument)
    }

    fn done(&mut self, node: NodeId, request: &Request) -> Result<(), OpError> {
        match self.call(node, request)? {
            Reply::Done => Ok(()),
            other => self.unexpected(node, other),
        }
    }

    /// The nodes whose agents run.
    fn running(&self) -> Vec<NodeId> {
        (0..self.setup.nodes).map(NodeId).filter(|n| !self.killed[n.index()]).collect()
    }

    /// Each running node's counters: (node, keys forwarded, peers failed).
    fn counters(&mut self) -> Result<Vec<(NodeId, u64, u64)>, OpError> {
        let mut out = Vec::new();
        for (n, r) in self.broadcast(&Request::Counters) {
            match r? {
                Reply::Counters { keys_forwarded, peers_failed } => {
                    out.push((n, keys_forwarded, peers_failed))
                }
                other => return self.unexpected(n, other),
            }
        }
        Ok(out)
    }

    /// One result per worker of every node, in node and worker order, from `request` sent
    /// to every running agent; a killed node's workers end with `Closed`.
    fn per_worker(&mut self, request: &Request) -> BarrierOut {
        let mut replies = self.broadcast(request).into_iter().peekable();
        let mut out = Vec::new();
        for n in (0..self.setup.nodes).map(NodeId) {
            let reply = match replies.peek() {
                Some((m, _)) if *m == n => replies.next().map(|(_, r)| r),
                _ => None,
            };
            let results = match reply {
                None => Err(OpError::Closed),
                Some(Err(e)) => Err(e),
                Some(Ok(Reply::Workers(rs))) if rs.len() == usize::from(self.setup.workers) => Ok(rs),
                Some(Ok(other)) => self.unexpected(n, other),
            };
            for w in (0..self.setup.workers).map(WorkerId) {
                let r = match &results {
                    Err(e) => Err(*e),
                    Ok(rs) => match rs[w.index()].clone().map_err(|e| e.to_op()) {
                        Ok(()) => Ok(()),
                        Err(Ok(op)) => Err(op),
                        Err(Err(what)) => {
                            self.trouble.push(format!("the agent of node {}: {what}", n.0));
                            Err(OpError::InvalidArgument)
                        }
                    },
                };
                out.push((n, w, r));
            }
        }
        out
    }
}

impl Executor for ProcessExecutor {
    fn setup(&self) -> &Setup {
        &self.setup
    }

    fn pull(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        keys: &[Key],
    ) -> Result<(Vec<f32>, Vec<bool>), OpError> {
        match self.call(node, &Request::Pull { worker: worker.0, keys: key_numbers(keys) })? {
            Reply::Pulled { val_bits, local } if local.len() == keys.len() => {
                Ok((from_bits(&val_bits), local))
            }
            other => self.unexpected(node, other),
        }
    }

    fn write(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        set: bool,
        keys: &[Key],
        vals: &[f32],
    ) -> Result<(), OpError> {
        self.done(
            node,
            &Request::Write { worker: worker.0, set, keys: key_numbers(keys), val_bits: to_bits(vals) },
        )
    }

    fn localize(&mut self, node: NodeId, worker: WorkerId, keys: &[Key]) -> Result<(), OpError> {
        self.done(node, &Request::Localize { worker: worker.0, keys: key_numbers(keys) })
    }

    fn owners(&mut self, key: Key) -> Vec<NodeId> {
        let mut out = Vec::new();
        for (n, r) in self.broadcast(&Request::Look { key: key.0 }) {
            match r {
                Ok(Reply::Look { holds, .. }) => out.extend(holds.then_some(n)),
                Ok(other) => _ = self.unexpected::<()>(n, other),
                // The agent broke: recorded, and the trace fails at its end.
                Err(_) => {}
            }
        }
        out
    }

    fn replicas(&mut self, key: Key) -> Vec<NodeId> {
        let mut out = Vec::new();
        for (n, r) in self.broadcast(&Request::Look { key: key.0 }) {
            match r {
                Ok(Reply::Look { replica, .. }) => out.extend(replica.then_some(n)),
                Ok(other) => _ = self.unexpected::<()>(n, other),
                Err(_) => {}
            }
        }
        out
    }

    fn intent(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        keys: &[Key],
        start: Clock,
        end: Clock,
    ) -> Result<(), OpError> {
        let keys = key_numbers(keys);
        self.done(node, &Request::Intent { worker: worker.0, keys, start: start.0, end: end.0 })
    }

    fn advance(&mut self, node: NodeId, worker: WorkerId, by: u64) -> Result<Clock, OpError> {
        match self.call(node, &Request::Advance { worker: worker.0, by })? {
            Reply::Clock { clock } => Ok(Clock(clock)),
            other => self.unexpected(node, other),
        }
    }

    fn wait_sync(&mut self, node: NodeId, worker: WorkerId) -> Result<(), OpError> {
        self.done(node, &Request::WaitSync { worker: worker.0 })
    }

    fn settle(&mut self) -> Result<(), OpError> {
        let running = self.running();
        settle_with(self.hold, &running, |n| self.wait_sync(n, WorkerId(0)))
    }

    fn concurrent_push(&mut self, keys: &[Key], rounds: u32, each: f32) -> Result<(), OpError> {
        let request = Request::ConcurrentPush { keys: key_numbers(keys), rounds, each_bits: each.to_bits() };
        let mut replies = self.broadcast(&request).into_iter();
        // As on one process: every node's workers push, and the first node's error is the answer.
        let mut first = Ok(());
        for n in (0..self.setup.nodes).map(NodeId) {
            let r = if self.killed[n.index()] {
                Err(OpError::Closed)
            } else {
                match replies.next() {
                    Some((_, Ok(Reply::Done))) => Ok(()),
                    Some((_, Err(e))) => Err(e),
                    Some((_, Ok(other))) => self.unexpected(n, other),
                    None => Err(OpError::Closed),
                }
            };
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    fn gated_steps(&mut self, spec: &GatedSteps) -> Result<Vec<f32>, String> {
        // Every worker of every node takes part: a stopped node's would never come.
        if let Some(i) = self.killed.iter().position(|k| *k) {
            return Err(format!("n{i} is stopped"));
        }
        let request = Request::GatedSteps {
            keys: key_numbers(&spec.keys),
            steps: spec.steps,
            each_bits: spec.each.to_bits(),
            slow: spec.slow.map(|(n, w)| (n.0, w.0)),
        };
        let mut replies = self.broadcast(&request).into_iter();
        let mut results = Vec::new();
        for n in (0..self.setup.nodes).map(NodeId) {
            results.push(match replies.next() {
                Some((_, Ok(Reply::Steps(r)))) => r.map(|bits| from_bits(&bits)),
                Some((_, Err(e))) => Err(format!("n{n}: {e}")),
                Some((_, Ok(other))) => self.unexpected(n, other).map_err(|e| format!("n{n}: {e}")),
                None => Err(format!("n{n}: no answer")),
            });
        }
        gated::combine(results)
    }

    fn checkpoint(&mut self, op: CheckpointOp, dir: &Path) -> Result<(), String> {
        // Every worker of every node takes part: a stopped node's would never come.
        if let Some(i) = self.killed.iter().position(|k| *k) {
            return Err(format!("n{i} is stopped"));
        }
        let dir = dir.to_str().ok_or_else(|| format!("{} is not UTF-8: it cannot cross", dir.display()))?;
        let request = Request::Checkpoint { op, dir: dir.to_string() };
        let workers = usize::from(self.setup.workers);
        let mut replies = self.broadcast(&request).into_iter();
        let mut results = Vec::new();
        for n in (0..self.setup.nodes).map(NodeId) {
            match replies.next() {
                Some((_, Ok(Reply::Checkpoint(rs)))) if rs.len() == workers => results.extend(rs),
                Some((_, Err(e))) => results.push(Err(format!("n{n}: {e}"))),
                Some((_, Ok(other))) => {
                    results.push(self.unexpected(n, other).map_err(|e| format!("n{n}: {e}")))
                }
                None => results.push(Err(format!("n{n}: no answer"))),
            }
        }
        crate::trace::ckpt::combine(results)
    }

    fn register(&mut self, dist: &Distribution, level: Conformity) -> Result<DistId, OpError> {
        let dist = WireDist::from_dist(dist).map_err(|what| {
            self.trouble.push(what);
            OpError::InvalidArgument
        })?;
        let request = Request::Register { dist, level: level.name().into() };
        let mut ids = Vec::new();
        for n in (0..self.setup.nodes).map(NodeId) {
            match self.call(n, &request)? {
                Reply::Dist { id } => ids.push(DistId(id)),
                other => return self.unexpected(n, other),
            }
        }
        ids.first().copied().ok_or(OpError::InvalidArgument)
    }

    fn prepare_sample(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        dist: DistId,
        n: u64,
        (start, end): (Clock, Clock),
    ) -> Result<SampleHandle, OpError> {
        let request =
            Request::PrepareSample { worker: worker.0, dist: dist.0, n, start: start.0, end: end.0 };
        match self.call(node, &request)? {
            Reply::Handle { handle } => Ok(SampleHandle(handle)),
            other => self.unexpected(node, other),
        }
    }

    fn pull_sample(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        handle: SampleHandle,
        count: usize,
    ) -> Result<SampleOut, OpError> {
        match self.call(node, &Request::PullSample { worker: worker.0, handle: handle.0, count })? {
            Reply::Sampled { keys, val_bits, local } if local.len() == keys.len() => {
                Ok((to_keys(&keys), from_bits(&val_bits), local))
            }
            other => self.unexpected(node, other),
        }
    }

    fn finish_sample(&mut self, node: NodeId, worker: WorkerId, handle: SampleHandle) -> Result<(), OpError> {
        self.done(node, &Request::FinishSample { worker: worker.0, handle: handle.0 })
    }

    fn sampling_stats(&mut self, node: NodeId, worker: WorkerId) -> Result<SamplingStats, OpError> {
        match self.call(node, &Request::SamplingStats { worker: worker.0 })? {
            Reply::Sampling(s) => Ok(s.into()),
            other => self.unexpected(node, other),
        }
    }

    fn keys_forwarded(&mut self) -> u64 {
        // A broken agent is recorded and fails the trace at its end.
        let running: u64 = self.counters().map(|c| c.iter().map(|(_, f, _)| f).sum()).unwrap_or(0);
        self.forwarded_by_killed + running
    }

    fn barrier(&mut self) -> BarrierOut {
        self.per_worker(&Request::Barrier)
    }

    fn kill(&mut self, node: NodeId) -> Result<(), OpError> {
        self.agent(node)?;
        // What it forwarded stays counted, as a stopped node's counters do in one process.
        if let Reply::Counters { keys_forwarded, .. } = self.call(node, &Request::Counters)? {
            self.forwarded_by_killed += keys_forwarded;
        }
        if let Some(mut a) = self.agents[node.index()].take() {
            a.kill();
        }
        self.killed[node.index()] = true;
        let failed = self.killed.iter().filter(|k| **k).count() as u64;
        let deadline = Instant::now() + KILL_WAIT;
        while !self.counters()?.iter().all(|(_, _, told)| *told >= failed) {
            if Instant::now() >= deadline {
                return Err(OpError::Timeout);
            }
            thread::sleep(KILL_POLL);
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), String> {
        let killed = self.killed.clone();
        let stopped = |n: NodeId| killed.get(n.index()).copied().unwrap_or(false);
        let results: Vec<Result<(), OpError>> = self
            .per_worker(&Request::Finalize)
            .into_iter()
            .filter(|(n, _, _)| !stopped(*n))
            .map(|(_, _, r)| r)
            .collect();
        let mut outcome = finalized(results, stopped);
        if outcome.is_ok() {
            for (n, r) in self.broadcast(&Request::Shutdown) {
                match r {
                    Ok(Reply::Done) => {}
                    Ok(other) => _ = self.unexpected::<()>(n, other),
                    Err(e) => {
                        outcome = Err(format!("shutdown of node {}: {e}", n.0));
                        break;
                    }
                }
            }
        }
        // After a clean shutdown every agent exits by itself, successfully.
        for n in self.running() {
            let Some(Some(a)) = self.agents.get_mut(n.index()) else { continue };
            if outcome.is_err() {
                break;
            }
            match a.wait_exit(EXIT_WAIT) {
                Some(s) if s.success() => {}
                Some(s) => outcome = Err(a.trouble(&format!("exited with {s} after its shutdown"))),
                None => outcome = Err(a.trouble("did not exit after its shutdown")),
            }
        }
        // Whatever still runs is killed and reaped here, not later.
        self.agents.clear();
        if !self.trouble.is_empty() {
            return Err(self.trouble.join("\n"));
        }
        outcome
    }
}

//! The steps of a `gated-steps` on the simulator: every worker of every node is a small state
//! machine (pull, then push and advance and wait at the gate, then the next step), all of them
//! driven together in virtual time. The slow worker thinks [`gated::SLOW_STEP_US`] before each
//! of its steps, as the sim's workloads give workers think time between operations; the others
//! go on at once. Where the runtime's worker would wait before issuing an operation (one that
//! would overtake its own earlier operation on a key), the simulated cluster refuses it as
//! `Busy`, and the worker issues it again once something happened.

use parma_core::access::PullMisses;
use parma_core::wire::WriteKind;
use parma_core::{Clock, Completion, Gate, Instant, NodeId, OpError, Ticket, WorkerId};

use super::exec::{GatedSteps, Setup};
use super::gated;
use crate::sim::Cluster;

/// Most simulation steps the steps of one `gated-steps` may take.
const SIM_STEPS_MAX: u64 = 5_000_000;

/// What the steps left: every worker's push tickets (to wait for), and the reads that broke
/// the gate's guarantee.
pub(super) struct Ran {
    pub pushes: Vec<(NodeId, WorkerId, Ticket)>,
    pub broken: Vec<String>,
}

enum Wait {
    /// Its next step starts at this time (with a pull).
    Idle(Instant),
    Pull {
        ticket: Ticket,
        misses: PullMisses,
        vals: Vec<f32>,
    },
    /// To push, then advance its clock.
    Push,
    /// To wait at the gate.
    ToGate,
    Gate(Ticket),
    Done,
}

struct Stepper {
    node: NodeId,
    worker: WorkerId,
    /// Steps done.
    step: u64,
    wait: Wait,
    /// A read of it broke a check already (only the first is reported).
    broken: bool,
}

/// Runs the steps of `spec` on every worker of `cluster` until all are done.
pub(super) fn run_steps(cluster: &mut Cluster, setup: &Setup, spec: &GatedSteps) -> Result<Ran, String> {
    let mut steppers = Vec::new();
    for n in (0..setup.nodes).map(NodeId) {
        for w in (0..setup.workers).map(WorkerId) {
            // Under SparseSSP the intent declares the keys (from p clocks on) under every
            // technique.
            if setup.technique.uses_rounds() || setup.gate.speculation() > 0 {
                let start = cluster.nodes()[n.index()].clock(w);
                let end = Clock(start.0 + u64::from(spec.steps) + 1);
                cluster
                    .intent(n, w, &spec.keys, start, end)
                    .map_err(|e| format!("n{n} w{w}: intent: {e}"))?;
            }
            let think = if spec.is_slow(n, w) { gated::SLOW_STEP_US } else { 0 };
            let first = cluster.now() + parma_core::Duration(think);
            steppers.push(Stepper { node: n, worker: w, step: 0, wait: Wait::Idle(first), broken: false });
        }
    }
    let mut ran = Ran { pushes: Vec::new(), broken: Vec::new() };
    let limit = cluster.steps() + SIM_STEPS_MAX;
    loop {
        for s in &mut steppers {
            s.poll(cluster, setup, spec, &mut ran)?;
        }
        if steppers.iter().all(|s| matches!(s.wait, Wait::Done)) {
            return Ok(ran);
        }
        if cluster.steps() > limit {
            return Err(format!("the steps did not end within {SIM_STEPS_MAX} simulation steps"));
        }
        let starts = steppers.iter().filter_map(|s| match s.wait {
            Wait::Idle(t) if t > cluster.now() => Some(t),
            _ => None,
        });
        let next = cluster.next_due().into_iter().chain(starts).min();
        match next {
            Some(t) => cluster.run_until(t.max(cluster.now())),
            None => {
                let waiting: Vec<String> = steppers
                    .iter()
                    .filter(|s| !matches!(s.wait, Wait::Done))
                    .map(|s| format!("n{} w{} at step {}", s.node, s.worker, s.step))
                    .collect();
                return Err(format!("workers wait but nothing is due: {}", waiting.join(", ")));
            }
        }
    }
}

impl Stepper {
    /// Moves this worker on as far as it can now.
    fn poll(
        &mut self,
        cluster: &mut Cluster,
        setup: &Setup,
        spec: &GatedSteps,
        ran: &mut Ran,
    ) -> Result<(), String> {
        let (n, w) = (self.node, self.worker);
        let op = |what: &str, e| format!("n{n} w{w}: {what}: {e}");
        let total = setup.layout.total_len(&spec.keys).map_err(|k| format!("key {k} outside layout"))?;
        loop {
            match std::mem::replace(&mut self.wait, Wait::Done) {
                Wait::Done => return Ok(()),
                Wait::Idle(_) if self.step == u64::from(spec.steps) => return Ok(()),
                Wait::Idle(t) if t > cluster.now() => {
                    self.wait = Wait::Idle(t);
                    return Ok(());
                }
                Wait::Idle(t) => {
                    let mut vals = vec![0.0; total];
                    match cluster.pull(n, w, &spec.keys, &mut vals) {
                        Ok((ticket, misses)) => self.wait = Wait::Pull { ticket, misses, vals },
                        Err(OpError::Busy) => {
                            self.wait = Wait::Idle(t);
                            return Ok(());
                        }
                        Err(e) => return Err(op("pull", e)),
                    }
                }
                Wait::Pull { ticket, misses, mut vals } => {
                    let Some(r) = cluster.take_result(n, w, ticket) else {
                        self.wait = Wait::Pull { ticket, misses, vals };
                        return Ok(());
                    };
                    match r.map_err(|e| op("pull", e))? {
                        Completion::Pull(remote) => {
                            misses.fill(&remote, &mut vals).map_err(|e| op("pull", e))?
                        }
                        other => return Err(format!("n{n} w{w}: a pull completed as {other:?}")),
                    }
                    let clock = cluster.nodes()[n.index()].clock(w).0;
                    let workers = gated::workers_total(setup);
                    let at = (self.step, clock);
                    let gate = (setup.gate, setup.technique);
                    if let Err(e) = gated::check_read(gate, spec, &setup.layout, workers, (n, w), at, &vals) {
                        if !std::mem::replace(&mut self.broken, true) {
                            ran.broken.push(e);
                        }
                    }
                    self.wait = Wait::Push;
                }
                Wait::Push => {
                    let add = vec![spec.each; total];
                    match cluster.write(n, w, WriteKind::Add, &spec.keys, &add) {
                        Ok(t) => ran.pushes.push((n, w, t)),
                        Err(OpError::Busy) => {
                            self.wait = Wait::Push;
                            return Ok(());
                        }
                        Err(e) => return Err(op("push", e)),
                    }
                    cluster.advance_clock(n, w).map_err(|e| op("advance", e))?;
                    if setup.gate == Gate::Async {
                        self.next_step(cluster.now(), spec);
                    } else {
                        self.wait = Wait::ToGate;
                    }
                }
                Wait::ToGate => match cluster.gate(n, w) {
                    Ok(ticket) => self.wait = Wait::Gate(ticket),
                    Err(OpError::Busy) => {
                        self.wait = Wait::ToGate;
                        return Ok(());
                    }
                    Err(e) => return Err(op("gate", e)),
                },
                Wait::Gate(ticket) => match cluster.take_result(n, w, ticket) {
                    None => {
                        self.wait = Wait::Gate(ticket);
                        return Ok(());
                    }
                    Some(Ok(Completion::Gate)) => self.next_step(cluster.now(), spec),
                    Some(r) => {
                        let clock = cluster.nodes()[n.index()].clock(w).0;
                        return Err(format!("n{n} w{w}: the gate at clock {clock} ended with {r:?}"));
                    }
                },
            }
        }
    }

    /// One step done: the next starts now, or after a while for the slow worker.
    fn next_step(&mut self, now: Instant, spec: &GatedSteps) {
        self.step += 1;
        let think = if spec.is_slow(self.node, self.worker) { gated::SLOW_STEP_US } else { 0 };
        self.wait = Wait::Idle(now + parma_core::Duration(think));
    }
}

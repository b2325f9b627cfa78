//! The `gated-steps` command: what it asks for, and the checks every executor makes on what
//! its workers read, so that the threaded runtimes, the agents and the simulator judge a read
//! alike.
//!
//! Every worker of every node, all at once, runs `steps` steps; in each it pulls the keys,
//! pushes `each` to every element of every key and advances its clock (waiting at the gate).
//! Every worker pushes once per clock, so under SSP(s) (BSP: s = 0) a pull after `i`
//! advances must show the pushes of every worker at its first `i − s` steps, and, where a
//! worker reads its own writes, its own pushes of the `min(i, s)` steps after them. A worker
//! reads its own writes under the techniques without replicas; a replica promises less (it is
//! a snapshot of its owner plus local updates, and the sim's workloads do not check it
//! either: a replica installed from an answer given before the worker's push reached the
//! owner does not show that push until the next sync round). Under
//! `async` and bounded delay only the final sums are checked. Nothing read may exceed the
//! final sum. The final sums must be exact: `each` × workers × nodes × steps.
//!
//! The bound counts steps of this command, so the command expects every key at 0 and every
//! worker at the same clock when it starts (a fresh cluster block).

use std::time::Duration as StdDuration;

use parma_core::{Gate, Key, Layout, NodeId, Technique, WorkerId};

use super::{Args, Setup};

/// What a `gated-steps` on a cluster whose workers finished fails with, on every executor.
pub const FINISHED: &str = "the workers finished already";
/// Most steps one `gated-steps` may ask for.
pub const STEPS_MAX: u32 = 1_000;
/// Largest `each=`: the sums must stay exact in an `f32` (below 2^24).
const EACH_MAX: u32 = 1_000;
/// How long the slow worker sleeps before each of its steps in the threaded executors.
pub const SLOW_STEP: StdDuration = StdDuration::from_millis(3);
/// How long the slow worker thinks before each of its steps on the simulator, in virtual µs
/// (as the sim's workloads give each worker think time between operations).
pub const SLOW_STEP_US: u64 = 3_000;

/// What a `gated-steps` command asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct GatedSteps {
    /// The keys every worker pulls and pushes in every step (distinct).
    pub keys: Vec<Key>,
    /// Steps per worker.
    pub steps: u32,
    /// What every worker adds to every element of every key in every step (a whole number).
    pub each: f32,
    /// The one worker that is slower than the others, if any.
    pub slow: Option<(NodeId, WorkerId)>,
}

impl GatedSteps {
    /// The command's arguments on the cluster `setup`: `keys= steps= each= [slow=n:w]`.
    pub fn parse(a: &Args<'_>, setup: &Setup) -> Result<GatedSteps, String> {
        let keys = a.keys()?;
        if keys.is_empty() {
            return Err("`gated-steps` needs at least one key".into());
        }
        if let Some(k) = keys.iter().find(|k| setup.layout.len_of(**k).is_none()) {
            return Err(format!("key {k} outside layout"));
        }
        if crate::distinct(&keys).len() != keys.len() {
            return Err("`gated-steps` needs distinct keys".into());
        }
        let steps: u32 = a.num("steps")?;
        if steps == 0 || steps > STEPS_MAX {
            return Err(format!("`steps=` must be 1 to {STEPS_MAX}"));
        }
        let each: u32 = a.num("each").map_err(|_| "`each=` must be a whole number".to_string())?;
        if each == 0 || each > EACH_MAX {
            return Err(format!("`each=` must be 1 to {EACH_MAX}"));
        }
        let total = u64::from(each) * workers_total(setup) * u64::from(steps);
        if total >= 1 << 24 {
            return Err(format!("a final sum of {total} would not be exact in an f32"));
        }
        let slow = match a.get("slow") {
            None => None,
            Some(v) => {
                let bad = || format!("`slow=` is `node:worker`, not `{v}`");
                let (n, w) = v.split_once(':').ok_or_else(bad)?;
                let (n, w) = (n.parse().map_err(|_| bad())?, w.parse().map_err(|_| bad())?);
                if n >= setup.nodes || w >= setup.workers {
                    return Err(format!("`slow=` names worker {w} of node {n}, not in the cluster"));
                }
                Some((NodeId(n), WorkerId(w)))
            }
        };
        Ok(GatedSteps { keys, steps, each: each as f32, slow })
    }

    /// Whether `worker` of `node` is the slow one.
    pub fn is_slow(&self, node: NodeId, worker: WorkerId) -> bool {
        self.slow == Some((node, worker))
    }

    /// The exact sum every element ends with.
    pub fn final_sum(&self, workers_total: u64) -> f32 {
        self.each * (workers_total * u64::from(self.steps)) as f32
    }
}

/// Workers of every node of `setup`.
pub fn workers_total(setup: &Setup) -> u64 {
    u64::from(setup.nodes) * u64::from(setup.workers)
}

/// Whether a worker reads its own writes under `technique` (see the module docs).
pub fn reads_own_writes(technique: Technique) -> bool {
    !technique.uses_replicas()
}

/// The least value a read may show under `gate` after the reading worker advanced `step`
/// times in this command, with `workers` workers in all, counting its own later pushes if
/// `own_writes`; `None` for gates that promise no bound on reads (`async`, bounded delay).
///
/// Under SparseSSP(s, p) the workers' intents, signaled when the command begins, declare the
/// keys from step p on: a read at step c must show every push of the steps t < c − s that
/// were declared (t ≥ p, and c ≥ p) and of those below c − s − p.
pub fn read_bound(gate: Gate, own_writes: bool, each: f32, workers: u64, step: u64) -> Option<f32> {
    let s = u64::from(gate.staleness()?);
    let p = u64::from(gate.speculation());
    let everyone =
        (0..step.saturating_sub(s)).filter(|t| t + s + p < step || (step >= p && *t >= p)).count() as u64;
    let own = if own_writes { step - everyone } else { 0 };
    Some(each * (workers * everyone + own) as f32)
}

/// Checks a read of `vals` (the keys' values, concatenated) by `who` after `step` advances,
/// at clock `clock`: at least the gate's bound, at most the final sum.
pub fn check_read(
    (gate, technique): (Gate, Technique),
    spec: &GatedSteps,
    layout: &Layout,
    workers: u64,
    who: (NodeId, WorkerId),
    (step, clock): (u64, u64),
    vals: &[f32],
) -> Result<(), String> {
    let bound = read_bound(gate, reads_own_writes(technique), spec.each, workers, step);
    let most = spec.final_sum(workers);
    let (n, w) = who;
    each_element(spec, layout, vals, |k, v| {
        if bound.is_some_and(|b| v < b) {
            let b = bound.unwrap_or_default();
            return Err(format!(
                "n{n} w{w} at clock {clock} read {v} for k{k}, below the bound {b} of {}",
                gate.name()
            ));
        }
        if v > most {
            return Err(format!("n{n} w{w} at clock {clock} read {v} for k{k}, above every push ({most})"));
        }
        Ok(())
    })
}

/// Checks the last read of `who`: every element holds the exact sum.
pub fn check_final(
    spec: &GatedSteps,
    layout: &Layout,
    workers: u64,
    who: (NodeId, WorkerId),
    vals: &[f32],
) -> Result<(), String> {
    let want = spec.final_sum(workers);
    let (n, w) = who;
    each_element(spec, layout, vals, |k, v| {
        if v == want {
            Ok(())
        } else {
            Err(format!("n{n} w{w} read {v} for k{k} at the end, not the exact sum {want}"))
        }
    })
}

fn each_element(
    spec: &GatedSteps,
    layout: &Layout,
    vals: &[f32],
    mut check: impl FnMut(Key, f32) -> Result<(), String>,
) -> Result<(), String> {
    let mut at = 0;
    for k in &spec.keys {
        let len = layout.len_of(*k).unwrap_or(0);
        let v = vals.get(at..at + len).ok_or_else(|| format!("a read too short for k{k}"))?;
        v.iter().try_for_each(|x| check(*k, *x))?;
        at += len;
    }
    Ok(())
}

/// What the nodes' (or workers') parts of a `gated-steps` ended with, as one answer: every
/// distinct failure, joined, or else the first sums (every one was checked exact).
pub fn combine(results: impl IntoIterator<Item = Result<Vec<f32>, String>>) -> Result<Vec<f32>, String> {
    let mut sums = None;
    let mut failures = Vec::new();
    for r in results {
        match r {
            Ok(v) => _ = sums.get_or_insert(v),
            Err(e) if !failures.contains(&e) => failures.push(e),
            Err(_) => {}
        }
    }
    if !failures.is_empty() {
        return Err(failures.join("; "));
    }
    sums.ok_or_else(|| "no worker ran".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_counts_everyone_s_old_pushes_and_one_s_own_recent_ones() {
        // 4 workers, each 2: BSP after 3 steps sees 3 steps of everyone.
        assert_eq!(read_bound(Gate::Bsp, true, 2.0, 4, 3), Some(24.0));
        assert_eq!(read_bound(Gate::Bsp, false, 2.0, 4, 3), Some(24.0));
        // SSP(2) after 3 steps: 1 step of everyone, 2 of one's own (where promised).
        let ssp = Gate::Ssp { staleness: 2 };
        assert_eq!(read_bound(ssp, true, 2.0, 4, 3), Some(12.0));
        assert_eq!(read_bound(ssp, false, 2.0, 4, 3), Some(8.0));
        assert_eq!(read_bound(ssp, true, 2.0, 4, 1), Some(2.0));
        assert_eq!(read_bound(ssp, false, 2.0, 4, 1), Some(0.0));
        assert_eq!(read_bound(Gate::Async, true, 2.0, 4, 3), None);
        assert_eq!(read_bound(Gate::BoundedDelay { delay: 1 }, true, 2.0, 4, 3), None);
        assert!(reads_own_writes(Technique::StaticPartitioning) && !reads_own_writes(Technique::Adaptive));
    }

    #[test]
    fn bad_arguments_are_refused_with_a_reason() {
        let setup = super::super::setup_from("cluster nodes=2 workers=2 keys=4 len=1 gate=bsp").unwrap();
        let parse = |line: &str| GatedSteps::parse(&Args::parse(line).unwrap(), &setup);
        let ok = parse("gated-steps keys=0..4 steps=3 each=2 slow=1:0").unwrap();
        assert_eq!(ok.slow, Some((NodeId(1), WorkerId(0))));
        assert_eq!(ok.final_sum(4), 24.0);
        for (line, why) in [
            ("gated-steps keys=0..5 steps=3 each=1", "outside layout"),
            ("gated-steps keys=1,1 steps=3 each=1", "distinct"),
            ("gated-steps keys=0 steps=0 each=1", "`steps=`"),
            ("gated-steps keys=0 steps=3 each=0.5", "whole number"),
            ("gated-steps keys=0 steps=3 each=1 slow=2:0", "not in the cluster"),
            ("gated-steps keys=0 steps=3 each=1 slow=1", "node:worker"),
            ("gated-steps keys=0 each=1", "needs `steps=`"),
        ] {
            let e = parse(line).unwrap_err();
            assert!(e.contains(why), "{line}: {e}");
        }
    }

    #[test]
    fn a_read_below_the_bound_names_worker_clock_key_value_and_bound() {
        let setup = super::super::setup_from("cluster nodes=2 workers=2 keys=4 len=2 gate=bsp").unwrap();
        let spec =
            GatedSteps::parse(&Args::parse("gated-steps keys=1,2 steps=3 each=1").unwrap(), &setup).unwrap();
        let who = (NodeId(1), WorkerId(0));
        let layout = &setup.layout;
        assert!(check_read(
            (Gate::Bsp, Technique::StaticPartitioning),
            &spec,
            layout,
            4,
            who,
            (2, 2),
            &[8.0, 8.0, 9.0, 8.0]
        )
        .is_ok());
        let e = check_read(
            (Gate::Bsp, Technique::StaticPartitioning),
            &spec,
            layout,
            4,
            who,
            (2, 2),
            &[8.0, 8.0, 8.0, 7.0],
        )
        .unwrap_err();
        assert_eq!(e, "n1 w0 at clock 2 read 7 for k2, below the bound 8 of bsp");
        let e = check_read(
            (Gate::Async, Technique::StaticPartitioning),
            &spec,
            layout,
            4,
            who,
            (2, 2),
            &[13.0, 0.0, 0.0, 0.0],
        )
        .unwrap_err();
        assert!(e.contains("above every push (12)"), "{e}");
        assert!(check_final(&spec, layout, 4, who, &[12.0; 4]).is_ok());
        let e = check_final(&spec, layout, 4, who, &[12.0, 12.0, 11.0, 12.0]).unwrap_err();
        assert_eq!(e, "n1 w0 read 11 for k2 at the end, not the exact sum 12");
    }
}

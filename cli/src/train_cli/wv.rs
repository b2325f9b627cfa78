//! `parma train wv`: its arguments, checked at the edge, and the command.

use std::path::PathBuf;

use clap::Args;
use parma_cli::node::NetOptions;
use parma_core::Conformity;
use parma_train::harness::run;
use parma_train::wv::corpus::{Corpus, EvalSets};
use parma_train::wv::{eval, WvOptions, WvTask};
use parma_train::TrainOptions;

use super::{check_common, parse_conformity, run_all, CommonArgs, Target};

/// `parma train wv`.
#[derive(Args, Debug)]
pub struct WvArgs {
    /// `corpus` (the English corpus assembled by `parma data fetch corpus`) or a text file of
    /// whitespace-separated tokens, taken as they are.
    #[arg(long, default_value = "corpus")]
    pub data: String,
    /// Analogy questions (`questions-words.txt`); default: the one `parma data fetch w2v-eval`
    /// cached, if there.
    #[arg(long)]
    pub analogies: Option<PathBuf>,
    /// Word pairs with a similarity score (`wordsim353.tsv`); default: the one `parma data
    /// fetch w2v-eval` cached, if there. SimLex-999 is scored as well whenever that fetch
    /// cached it.
    #[arg(long)]
    pub similarities: Option<PathBuf>,
    /// Words that occur fewer times are left out.
    #[arg(long, default_value_t = 5)]
    pub min_count: u32,
    /// Context words on each side, at most.
    #[arg(long, default_value_t = 5)]
    pub window: usize,
    /// Negatives per center word, drawn by the sampling manager from unigram^0.75.
    #[arg(long, default_value_t = 5)]
    pub negatives: usize,
    /// Subsampling threshold of frequent words (0: off).
    #[arg(long, default_value_t = 1e-3)]
    pub sample: f64,
    /// Analogies are answered among this many most frequent words.
    #[arg(long = "restrict-vocab", default_value_t = 30_000)]
    pub restrict: usize,
    /// Conformity level of the negatives: conform, bounded, long-term or non-conform.
    #[arg(long, value_parser = parse_conformity, default_value = "conform")]
    pub conformity: Conformity,
    /// Write the input vectors in word2vec's text format to this file after training.
    #[arg(long)]
    pub export: Option<PathBuf>,
    #[command(flatten)]
    pub common: CommonArgs,
}

impl WvArgs {
    /// The options of the task and of the first (or only) run.
    pub fn options(&self) -> (TrainOptions, WvOptions) {
        let wv = WvOptions {
            window: self.window,
            negatives: self.negatives,
            sample: self.sample,
            restrict: self.restrict,
        };
        (self.common.options(5, 0.025), wv)
    }
}

/// The cached file `file` of the fetched data set `name`, if it is there.
fn cached_member(name: &str, file: &str) -> Result<Option<PathBuf>, String> {
    let dir = parma_train::fetch::default_cache_dir();
    let first = parma_train::fetch::cached(&dir, name).map_err(|e| e.to_string())?;
    Ok(first.and_then(|p| p.parent().map(|d| d.join(file))))
}

fn eval_sets(args: &WvArgs) -> Result<EvalSets, String> {
    let mut sets = EvalSets::default();
    let analogies = match &args.analogies {
        Some(p) => Some(p.clone()),
        None => cached_member("w2v-eval", "questions-words.txt")?,
    };
    let pairs = match &args.similarities {
        Some(p) => Some(p.clone()),
        None => cached_member("w2v-eval", "wordsim353.tsv")?,
    };
    if analogies.is_none() && pairs.is_none() {
        eprintln!("note: no evaluation sets (`parma data fetch w2v-eval`, or --analogies/--similarities)");
    }
    if let Some(p) = analogies {
        sets.read_analogies(&p).map_err(|e| format!("--analogies: {e}"))?;
    }
    if let Some(p) = pairs {
        sets.read_pairs(&p).map_err(|e| format!("--similarities: {e}"))?;
    }
    // SimLex-999 is scored beside the pairs above whenever `data fetch w2v-eval` fetched it.
    if let Some(p) = cached_member("w2v-eval", "simlex999.txt")?.filter(|p| p.is_file()) {
        sets.read_simlex(&p).map_err(|e| format!("SimLex-999 ({}): {e}", p.display()))?;
    }
    Ok(sets)
}

/// Runs `parma train wv`.
pub fn run_wv_cmd(args: &WvArgs, cluster: Option<&NetOptions>) -> Result<(), String> {
    let (opts, wv) = args.options();
    let runs = check_common(&args.common, args.common.runs(&opts), cluster)?;
    wv.check().map_err(|e| e.to_string())?;
    if args.min_count == 0 {
        return Err("bad options: --min-count must be at least 1".into());
    }
    if args.export.is_some() && runs.len() > 1 {
        return Err(
            "bad options: --export writes one model; it cannot be used with --compare or --repeat".into()
        );
    }
    let file = if args.data == "corpus" {
        match cached_member("corpus", "corpus.txt")? {
            Some(p) => p,
            None => {
                return Err("--data corpus: not fetched; fetch it first with `parma data fetch corpus`".into())
            }
        }
    } else {
        PathBuf::from(&args.data)
    };
    let corpus = Corpus::load(&file, args.min_count).map_err(|e| format!("--data {}: {e}", args.data))?;
    let sets = eval_sets(args)?;
    let probe = WvTask::new(&corpus, &sets, &opts, &wv);
    eprintln!(
        "{}: {} tokens, {} in the vocabulary (min_count {}), {} words, {} after subsampling ({}); \
         {} analogy questions, {} word pairs, {} SimLex-999 pairs; dim {}, window {}, {} negatives, lr {} falling linearly, \
         {} epochs, batch {}, seed {}",
        args.data,
        corpus.raw_tokens,
        corpus.tokens.len(),
        args.min_count,
        corpus.vocab(),
        probe.subsampled_len(),
        wv.sample,
        sets.analogies.len(),
        sets.pairs.len(),
        sets.simlex.len(),
        opts.dim,
        wv.window,
        wv.negatives,
        opts.lr,
        opts.epochs,
        opts.batch,
        opts.seed,
    );
    drop(probe);
    let title = format!("skip-gram on {}", args.data);
    let mut model = None;
    // The target at gensim's settings on the assembled corpus (gensim itself: 21.7 %).
    let target =
        (args.data == "corpus").then_some(Target { metric: "analogy", bound: 0.18, higher_is_better: true });
    run_all(&args.common, &runs, &title, Some(args.conformity.name()), target, |r| {
        let task = WvTask::new(&corpus, &sets, r, &wv);
        let rep = run(&task, &args.data, r, args.conformity)?;
        model = task.take_model();
        Ok(rep)
    })?;
    if let (Some(path), Some(m)) = (&args.export, model) {
        eval::export(path, &corpus, &m, opts.dim).map_err(|e| format!("--export {}: {e}", path.display()))?;
        eprintln!("vectors written to {} (word2vec text format)", path.display());
    }
    Ok(())
}

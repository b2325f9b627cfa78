//! What the harness needs from a training task: its examples, the keys each touches, one step's
//! arithmetic, and its evaluation. KGE ([`super::kge::KgeTask`]), matrix factorization
//! ([`super::mf::MfTask`]), logistic regression and word vectors implement it.
//!
//! Evaluation is split over threads: a split's queries (`0..eval_len`) are cut into parts,
//! each thread evaluates its parts with [`Task::evaluate_part`], and one thread merges the
//! partial results into a [`Quality`] with [`Task::merge`]. All of them read one view of the
//! model ([`Task::eval_view`]), made once per evaluation.

use std::ops::Range;

use parma::Key;
use serde::Serialize;

use super::eval::Ranking;
use super::params::NegSampler;
use super::TrainError;

/// A model's quality on one split.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Quality {
    /// Link prediction: filtered ranking.
    Ranking(Ranking),
    /// Rating prediction: root mean squared error.
    Rmse {
        /// The RMSE.
        rmse: f64,
    },
    /// Binary classification: area under the ROC curve and mean log loss.
    Classification {
        /// The AUC.
        auc: f64,
        /// Mean negative log-likelihood per example (natural log).
        logloss: f64,
    },
    /// Word vectors: analogy accuracy and word-similarity correlation.
    Words {
        /// Share of the analogy questions answered right (all questions whose four words are in
        /// the restricted vocabulary; the others count as wrong only in `analogy_all`).
        analogy: f64,
        /// Share of all analogy questions answered right, out-of-vocabulary ones counted wrong.
        analogy_all: f64,
        /// Spearman's ρ between the pairs' human scores and their cosine similarities
        /// (WordSim-353, or the `--similarities` file).
        similarity: f64,
        /// The same on SimLex-999, when it was fetched (NaN without it).
        simlex: f64,
    },
}

/// `x` with `digits` decimals, or `n/a` when it is NaN (a figure with nothing to measure it
/// on: word vectors without evaluation sets).
pub fn figure(x: f64, digits: usize) -> String {
    if x.is_nan() {
        "n/a".into()
    } else {
        format!("{x:.digits$}")
    }
}

impl Quality {
    /// The headline figure: MRR, RMSE, AUC or analogy accuracy (NaN when it has nothing to be
    /// measured on; print it with [`figure`]).
    pub fn primary(&self) -> f64 {
        match self {
            Quality::Ranking(r) => r.mrr,
            Quality::Rmse { rmse } => *rmse,
            Quality::Classification { auc, .. } => *auc,
            Quality::Words { analogy, .. } => *analogy,
        }
    }

    /// The headline figure's name.
    pub fn primary_name(&self) -> &'static str {
        match self {
            Quality::Ranking(_) => "MRR",
            Quality::Rmse { .. } => "RMSE",
            Quality::Classification { .. } => "AUC",
            Quality::Words { .. } => "analogy",
        }
    }

    /// The ranking, for link prediction.
    pub fn ranking(&self) -> Option<Ranking> {
        match self {
            Quality::Ranking(r) => Some(*r),
            _ => None,
        }
    }

    /// The other figures, for the summary table.
    pub fn details(&self) -> String {
        match self {
            Quality::Ranking(r) => format!("H@1 {:.3}, H@3 {:.3}, H@10 {:.3}", r.hits1, r.hits3, r.hits10),
            Quality::Rmse { .. } => "-".into(),
            Quality::Classification { logloss, .. } => format!("log loss {logloss:.4}"),
            Quality::Words { analogy_all, similarity, simlex, .. } => {
                format!(
                    "analogy (OOV wrong) {}, similarity rho {}, SimLex-999 rho {}",
                    figure(*analogy_all, 4),
                    figure(*similarity, 4),
                    figure(*simlex, 4)
                )
            }
        }
    }
}

/// A step's working memory, kept across steps. The harness fills `keys`/`vals` (and, for tasks
/// with negatives, `neg_keys`/`neg_vals`) before [`Task::step`], which leaves the keys to push in
/// `touched` and their deltas in `deltas`.
#[derive(Default)]
pub struct StepBuffers {
    /// The step's sorted distinct keys.
    pub keys: Vec<Key>,
    /// Their values, concatenated.
    pub vals: Vec<f32>,
    /// Negative samples.
    pub neg_keys: Vec<Key>,
    /// Their values.
    pub neg_vals: Vec<f32>,
    /// The keys to push.
    pub touched: Vec<Key>,
    /// Their deltas, concatenated.
    pub deltas: Vec<f32>,
    /// Scratch of the task's own: key → row. hashbrown's default hasher (foldhash): std's
    /// SipHash took 15 to 20 % of an LR step on Adult, in parma and in the baseline alike.
    pub(crate) rows: hashbrown::HashMap<u64, usize>,
    /// Scratch of the task's own: rows' values.
    pub(crate) row_vals: Vec<f32>,
    /// Scratch of the task's own: rows' gradients.
    pub(crate) grads: Vec<f32>,
}

/// A training task.
pub trait Task: Sync {
    /// One training example.
    type Example: Copy + Send + Sync;
    /// What evaluating a part of a split's queries leaves, for [`Task::merge`].
    type Partial: Send;
    /// The task's name in records (`kge`, `mf`).
    fn name(&self) -> &'static str;
    /// The model's name in records.
    fn model_name(&self) -> &'static str;
    /// The training examples.
    fn train(&self) -> &[Self::Example];
    /// Keys of the model, `0..keys()`.
    fn keys(&self) -> u64;
    /// `f32`s per key.
    fn value_len(&self) -> usize;
    /// Writes the initial value of `key` (a function of `seed` and `key` alone).
    fn init(&self, seed: u64, key: u64, out: &mut [f32]);
    /// The sorted distinct keys of `examples`.
    fn keys_of(&self, examples: &[Self::Example], keys: &mut Vec<Key>);
    /// Negative sampling: keys `0..n` to draw from uniformly, and how many a step on `examples`
    /// examples draws; `None` for tasks without negatives.
    fn negatives(&self, examples: usize) -> Option<(u64, usize)>;
    /// The distribution of the negatives: by default uniform over the `0..n` of
    /// [`Task::negatives`].
    fn negative_sampler(&self) -> Option<NegSampler> {
        self.negatives(1).map(|(n, _)| NegSampler::uniform(n))
    }
    /// One step on `examples` with the values in `b`; returns the summed loss.
    fn step(&self, examples: &[Self::Example], b: &mut StepBuffers) -> f64;
    /// Whether the task has a validation split apart from its test split. Without one (MF,
    /// LR, word vectors) every evaluation is of the test split, recorded as test.
    fn has_validation(&self) -> bool {
        true
    }
    /// The queries of the validation split (`test` false) or the test split: what evaluation
    /// is split over.
    fn eval_len(&self, test: bool) -> usize;
    /// The model as evaluation reads it, from every key's value (`value_len()` each, in key
    /// order); by default the values themselves.
    fn eval_view(&self, model: Vec<f32>) -> Vec<f32> {
        model
    }
    /// Evaluates the queries `part` of a split (within `0..eval_len(test)`) on `view`.
    fn evaluate_part(&self, view: &[f32], test: bool, part: Range<usize>) -> Self::Partial;
    /// The split's quality from the partial results of parts that cover its queries once,
    /// in the order of their queries.
    fn merge(&self, view: &[f32], test: bool, parts: Vec<Self::Partial>) -> Quality;
    /// Quality on a split in one thread, given every key's value.
    fn evaluate(&self, model: &[f32], test: bool) -> Quality {
        let view = self.eval_view(model.to_vec());
        let part = self.evaluate_part(&view, test, 0..self.eval_len(test));
        self.merge(&view, test, vec![part])
    }
    /// Called once with every key's value after the last epoch (to keep or export the model).
    fn finished(&self, _model: &[f32]) {}
    /// Expected accesses per key in one epoch, for NuPS's hot keys (multi-technique).
    fn access_counts(&self) -> Vec<(Key, u64)>;
    /// Refuses options the task cannot work with.
    fn check(&self, threads: usize) -> Result<(), TrainError> {
        if self.train().len() < threads {
            return Err(TrainError::Data(format!(
                "{} training examples cannot feed {threads} threads",
                self.train().len()
            )));
        }
        Ok(())
    }
}

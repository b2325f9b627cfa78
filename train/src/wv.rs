//! Word vectors: skip-gram with negative sampling (`parma train wv`; Mikolov et al. 2013,
//! NuPS §5's task for the sampling manager).
//!
//! Word `w` (numbered by frequency, most frequent 0) has two keys: its input vector, key `w`,
//! and its output vector, key `V + w`. A key's value is the vector (`dim` reals); plain SGD as
//! in word2vec, with a learning rate that falls linearly from `lr` to `lr · 1e-4` over the
//! whole run (the count of centers processed is shared by every thread, like word2vec's
//! `word_count_actual`).
//!
//! - Vocabulary: words that occur at least `min_count` times; the others are left out of the
//!   corpus before anything else.
//! - Subsampling of frequent words: an occurrence of a word of frequency `f` is kept with
//!   probability `(sqrt(f / t) + 1) · t / f` (word2vec's formula, `t` = `sample`). The draws are
//!   made once from the seed, so every epoch sees the same subsampled corpus.
//! - An example is a position of the subsampled corpus (a center word). Its window is
//!   `window - b` words on each side, `b` drawn from the seed and the position in `0..window`.
//!   Each (center, context) pair is one logistic step on `<in[context], out[center]>` (label 1)
//!   and `<in[context], out[n]>` for the center's `negatives` negatives (label 0), as word2vec's
//!   C code does it; the negatives are drawn once per center **by the sampling manager** from
//!   unigram^0.75 over the output keys and serve every context word of its window.
//! - Within a step, updates apply at once to the step's copies (sequential SGD, as word2vec
//!   within a thread); the step pushes each key's change.

pub mod corpus;
pub mod eval;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use parma::Key;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use self::corpus::{Corpus, EvalSets};
use super::params::NegSampler;
use super::task::{Quality, StepBuffers, Task};
use super::{mix, TrainError, TrainOptions};

/// Options of `parma train wv`.
#[derive(Clone, Debug, PartialEq)]
pub struct WvOptions {
    /// Context words on each side, at most.
    pub window: usize,
    /// Negatives per center word.
    pub negatives: usize,
    /// Subsampling threshold `t` (0: keep every occurrence).
    pub sample: f64,
    /// Analogy questions are answered among this many most frequent words.
    pub restrict: usize,
}

impl Default for WvOptions {
    fn default() -> WvOptions {
        WvOptions { window: 5, negatives: 5, sample: 1e-3, restrict: 30_000 }
    }
}

impl WvOptions {
    /// Refuses options that cannot work.
    pub fn check(&self) -> Result<(), TrainError> {
        let bad = |s: String| Err(TrainError::Options(s));
        if self.window == 0 || self.window > 100 {
            return bad(format!("--window must be between 1 and 100, not {}", self.window));
        }
        if self.negatives == 0 || self.negatives > 100 {
            return bad(format!("--negatives must be between 1 and 100, not {}", self.negatives));
        }
        if !(self.sample.is_finite() && (0.0..1.0).contains(&self.sample)) {
            return bad(format!("--sample must be a number in [0, 1), not {}", self.sample));
        }
        if self.restrict == 0 {
            return bad("--restrict-vocab must be at least 1".into());
        }
        Ok(())
    }
}

/// Skip-gram with negative sampling as a [`Task`].
pub struct WvTask<'a> {
    corpus: &'a Corpus,
    sets: &'a EvalSets,
    opt: WvOptions,
    dim: usize,
    lr: f32,
    seed: u64,
    /// The subsampled corpus.
    sub: Vec<u32>,
    /// Its positions (the examples).
    positions: Vec<u32>,
    /// Centers processed so far, by every thread.
    done: AtomicU64,
    /// Centers of the whole run.
    total: u64,
    /// The model after the last epoch (input vectors, `dim` per word).
    model: Mutex<Option<Vec<f32>>>,
}

impl<'a> WvTask<'a> {
    /// The task of training on `corpus`, evaluated on `sets` (options checked by the caller).
    pub fn new(corpus: &'a Corpus, sets: &'a EvalSets, opts: &TrainOptions, wv: &WvOptions) -> WvTask<'a> {
        let total_words: u64 = corpus.counts.iter().sum();
        let mut rng = StdRng::seed_from_u64(mix(opts.seed ^ 0x5b5a));
        let keep: Vec<f64> = corpus
            .counts
            .iter()
            .map(|c| {
                if wv.sample == 0.0 {
                    return 1.0;
                }
                let f = *c as f64 / total_words as f64;
                ((f / wv.sample).sqrt() + 1.0) * wv.sample / f
            })
            .collect();
        let sub: Vec<u32> =
            corpus.tokens.iter().copied().filter(|w| rng.gen::<f64>() < keep[*w as usize]).collect();
        let positions = (0..sub.len() as u32).collect();
        let total = sub.len() as u64 * u64::from(opts.epochs);
        WvTask {
            corpus,
            sets,
            opt: wv.clone(),
            dim: opts.dim,
            lr: opts.lr,
            seed: opts.seed,
            sub,
            positions,
            done: AtomicU64::new(0),
            total,
            model: Mutex::new(None),
        }
    }

    /// Tokens after subsampling.
    pub fn subsampled_len(&self) -> usize {
        self.sub.len()
    }

    /// The input vectors after the last epoch (`dim` per word, in vocabulary order).
    pub fn take_model(&self) -> Option<Vec<f32>> {
        self.model.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn vocab(&self) -> u64 {
        self.corpus.vocab() as u64
    }

    /// The context positions of center `p`.
    fn window(&self, p: u32) -> std::ops::Range<usize> {
        let b = (mix(self.seed ^ mix(u64::from(p) + 0x77)) % self.opt.window as u64) as usize;
        let w = self.opt.window - b;
        let p = p as usize;
        p.saturating_sub(w)..(p + w + 1).min(self.sub.len())
    }

    /// The row of `k` in the step's tables, added with `val` if new.
    fn row(&self, b: &mut StepBuffers, k: Key, val: &[f32]) -> usize {
        *b.rows.entry(k.0).or_insert_with(|| {
            b.touched.push(k);
            b.row_vals.extend_from_slice(val);
            b.touched.len() - 1
        })
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

impl Task for WvTask<'_> {
    type Example = u32;

    fn name(&self) -> &'static str {
        "wv"
    }

    fn model_name(&self) -> &'static str {
        "sgns"
    }

    fn train(&self) -> &[u32] {
        &self.positions
    }

    fn keys(&self) -> u64 {
        2 * self.vocab()
    }

    fn value_len(&self) -> usize {
        self.dim
    }

    /// Input vectors uniform in `±0.5 / dim`, output vectors zero (word2vec's initialization).
    fn init(&self, seed: u64, key: u64, out: &mut [f32]) {
        if key >= self.vocab() {
            out.fill(0.0);
            return;
        }
        let mut rng = StdRng::seed_from_u64(mix(seed ^ mix(key.wrapping_add(0x77f))));
        let half = 0.5 / self.dim as f32;
        out.iter_mut().for_each(|v| *v = rng.gen_range(-half..half));
    }

    fn keys_of(&self, examples: &[u32], keys: &mut Vec<Key>) {
        keys.clear();
        for p in examples {
            keys.push(Key(self.vocab() + u64::from(self.sub[*p as usize])));
            keys.extend(self.window(*p).map(|q| Key(u64::from(self.sub[q]))));
        }
        keys.sort_unstable();
        keys.dedup();
    }

    fn negatives(&self, examples: usize) -> Option<(u64, usize)> {
        Some((self.keys(), examples * self.opt.negatives))
    }

    fn negative_sampler(&self) -> Option<NegSampler> {
        let weights: Vec<f64> = self.corpus.counts.iter().map(|c| (*c as f64).powf(0.75)).collect();
        Some(NegSampler::weighted(self.vocab(), &weights))
    }

    fn step(&self, examples: &[u32], b: &mut StepBuffers) -> f64 {
        let d = self.dim;
        let done = self.done.fetch_add(examples.len() as u64, Ordering::Relaxed);
        let lr = self.lr * (1.0 - done as f32 / self.total.max(1) as f32).max(1e-4);
        b.rows.clear();
        b.touched.clear();
        b.row_vals.clear();
        let (keys, vals) = (std::mem::take(&mut b.keys), std::mem::take(&mut b.vals));
        for (i, k) in keys.iter().enumerate() {
            self.row(b, *k, &vals[i * d..(i + 1) * d]);
        }
        let (nk, nv) = (std::mem::take(&mut b.neg_keys), std::mem::take(&mut b.neg_vals));
        let negs: Vec<usize> =
            nk.iter().enumerate().map(|(i, k)| self.row(b, *k, &nv[i * d..(i + 1) * d])).collect();
        // The values as pulled, to push the differences.
        b.grads.clear();
        b.grads.extend_from_slice(&b.row_vals);
        let mut neu = vec![0.0f32; d];
        let mut loss = 0.0f64;
        for (e, p) in examples.iter().enumerate() {
            let center = self.sub[*p as usize];
            let out_c = b.rows[&(self.vocab() + u64::from(center))];
            let targets = std::iter::once((out_c, 1.0f32))
                .chain(negs[e * self.opt.negatives..(e + 1) * self.opt.negatives].iter().map(|r| (*r, 0.0)));
            let targets: Vec<(usize, f32)> =
                targets.filter(|(r, label)| *label == 1.0 || *r != out_c).collect();
            for q in self.window(*p) {
                if q == *p as usize {
                    continue;
                }
                let input = b.rows[&u64::from(self.sub[q])];
                neu.fill(0.0);
                for &(t, label) in &targets {
                    let (l1, l2) = (&b.row_vals[input * d..(input + 1) * d], &b.row_vals[t * d..(t + 1) * d]);
                    let f: f32 = l1.iter().zip(l2).map(|(x, y)| x * y).sum();
                    let s = sigmoid(f);
                    loss -= f64::from(if label == 1.0 { s } else { 1.0 - s }.max(1e-7).ln());
                    let g = (label - s) * lr;
                    for (n, v) in neu.iter_mut().zip(&b.row_vals[t * d..(t + 1) * d]) {
                        *n += g * v;
                    }
                    for k in 0..d {
                        let x = b.row_vals[input * d + k];
                        b.row_vals[t * d + k] += g * x;
                    }
                }
                for (v, n) in b.row_vals[input * d..(input + 1) * d].iter_mut().zip(&neu) {
                    *v += n;
                }
            }
        }
        b.deltas.clear();
        b.deltas.extend(b.row_vals.iter().zip(&b.grads).map(|(now, was)| now - was));
        b.keys = keys;
        b.vals = vals;
        b.neg_keys = nk;
        b.neg_vals = nv;
        loss
    }

    /// The analogy and similarity sets are one set: every evaluation is of it, recorded as
    /// test.
    fn has_validation(&self) -> bool {
        false
    }

    /// Analogy questions answered right, and those asked (all four words within the
    /// restricted vocabulary).
    type Partial = (u64, u64);

    /// A query is an analogy question (the word pairs, far fewer, are scored in the merge).
    fn eval_len(&self, _test: bool) -> usize {
        self.sets.analogies.len()
    }

    /// The input vectors scaled to unit length.
    fn eval_view(&self, model: Vec<f32>) -> Vec<f32> {
        eval::normalized(&model[..self.corpus.vocab() * self.dim], self.dim)
    }

    fn evaluate_part(&self, view: &[f32], _test: bool, part: std::ops::Range<usize>) -> (u64, u64) {
        let questions = &self.sets.analogies[part];
        eval::analogy_counts(self.corpus, view, self.dim, questions, self.opt.restrict)
    }

    fn merge(&self, view: &[f32], _test: bool, parts: Vec<(u64, u64)>) -> Quality {
        let (right, asked) = parts.into_iter().fold((0, 0), |(r, a), (x, y)| (r + x, a + y));
        let share = |n: u64| if n == 0 { f64::NAN } else { right as f64 / n as f64 };
        let (similarity, _) = eval::similarity(self.corpus, view, self.dim, &self.sets.pairs);
        let (simlex, _) = eval::similarity(self.corpus, view, self.dim, &self.sets.simlex);
        Quality::Words {
            analogy: share(asked),
            analogy_all: share(self.sets.analogies.len() as u64),
            similarity,
            simlex,
        }
    }

    fn finished(&self, model: &[f32]) {
        let input = model[..self.corpus.vocab() * self.dim].to_vec();
        *self.model.lock().unwrap_or_else(|e| e.into_inner()) = Some(input);
    }

    fn access_counts(&self) -> Vec<(Key, u64)> {
        let v = self.vocab();
        let mut counts = vec![0u64; 2 * v as usize];
        for w in &self.sub {
            counts[*w as usize] += 2 * self.opt.window as u64;
            counts[(v + u64::from(*w)) as usize] += 1 + self.opt.negatives as u64;
        }
        counts.into_iter().enumerate().filter(|(_, c)| *c > 0).map(|(k, c)| (Key(k as u64), c)).collect()
    }
}

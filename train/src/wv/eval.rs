//! Word-vector quality: Google analogy accuracy (3CosAdd over the most frequent words, as
//! gensim's `evaluate_word_analogies` with `restrict_vocab`), Spearman's ρ of word-pair
//! similarities, and the word2vec text format.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use super::corpus::{Corpus, EvalSets};

/// Rows of `vecs` (`dim` each) scaled to unit length (zero rows stay zero).
pub fn normalized(vecs: &[f32], dim: usize) -> Vec<f32> {
    let mut out = vecs.to_vec();
    for row in out.chunks_exact_mut(dim) {
        let n = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        if n > 0.0 {
            row.iter_mut().for_each(|x| *x /= n);
        }
    }
    out
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Analogy accuracy: (right / questions with all four words among the `restrict` most frequent,
/// right / all questions). The answer is the word closest (cosine) to `b - a + c` among the
/// `restrict` most frequent, `a`, `b` and `c` excluded. NaN where there is no question to
/// count (shown as n/a).
pub fn analogy(corpus: &Corpus, unit: &[f32], dim: usize, sets: &EvalSets, restrict: usize) -> (f64, f64) {
    let (right, asked) = analogy_counts(corpus, unit, dim, &sets.analogies, restrict);
    let share = |n: u64| if n == 0 { f64::NAN } else { right as f64 / n as f64 };
    (share(asked), share(sets.analogies.len() as u64))
}

/// Of `questions`: (answered right, asked), where a question is asked when its four words are
/// among the `restrict` most frequent; answered as [`analogy`] says.
pub fn analogy_counts(
    corpus: &Corpus,
    unit: &[f32],
    dim: usize,
    questions: &[[String; 4]],
    restrict: usize,
) -> (u64, u64) {
    let index = corpus.index();
    let n = restrict.min(corpus.vocab());
    let (mut right, mut asked) = (0u64, 0u64);
    let mut target = vec![0.0f32; dim];
    for q in questions {
        let ids: Option<Vec<usize>> =
            q.iter().map(|w| index.get(w.as_str()).map(|i| *i as usize).filter(|i| *i < n)).collect();
        let Some(ids) = ids else { continue };
        asked += 1;
        let row = |i: usize| &unit[i * dim..(i + 1) * dim];
        for (((t, a), b), c) in target.iter_mut().zip(row(ids[0])).zip(row(ids[1])).zip(row(ids[2])) {
            *t = b - a + c;
        }
        let (mut best, mut best_score) = (usize::MAX, f32::NEG_INFINITY);
        for w in 0..n {
            if w == ids[0] || w == ids[1] || w == ids[2] {
                continue;
            }
            let s = dot(row(w), &target);
            if s > best_score {
                (best, best_score) = (w, s);
            }
        }
        right += u64::from(best == ids[3]);
    }
    (right, asked)
}

/// Spearman's ρ between the `pairs`' scores and their cosine similarity, over the pairs whose
/// words are both in the vocabulary; with the number of pairs used. NaN for fewer than 2.
pub fn similarity(
    corpus: &Corpus,
    unit: &[f32],
    dim: usize,
    pairs: &[(String, String, f64)],
) -> (f64, usize) {
    let index: HashMap<&str, u32> = corpus.index();
    let (mut human, mut model) = (Vec::new(), Vec::new());
    for (a, b, s) in pairs {
        if let (Some(i), Some(j)) = (index.get(a.as_str()), index.get(b.as_str())) {
            let (i, j) = (*i as usize, *j as usize);
            human.push(*s);
            model.push(f64::from(dot(&unit[i * dim..(i + 1) * dim], &unit[j * dim..(j + 1) * dim])));
        }
    }
    (spearman(&human, &model), human.len())
}

/// Ranks from 1, ties sharing their mean rank.
fn ranks(x: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..x.len()).collect();
    idx.sort_by(|a, b| x[*a].total_cmp(&x[*b]));
    let mut r = vec![0.0; x.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && x[idx[j + 1]] == x[idx[i]] {
            j += 1;
        }
        for k in &idx[i..=j] {
            r[*k] = (i + j) as f64 / 2.0 + 1.0;
        }
        i = j + 1;
    }
    r
}

/// Spearman's rank correlation (Pearson's on the ranks); NaN for fewer than 2 points or a
/// constant series.
pub fn spearman(a: &[f64], b: &[f64]) -> f64 {
    if a.len() < 2 {
        return f64::NAN;
    }
    let (ra, rb) = (ranks(a), ranks(b));
    let n = ra.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let cov: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = ra.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = rb.iter().map(|y| (y - mb).powi(2)).sum();
    cov / (va * vb).sqrt()
}

/// Writes `vecs` (one row of `dim` per word of `corpus`) in word2vec's text format: a line
/// `words dim`, then `word v1 v2 ...` per word.
pub fn export(path: &Path, corpus: &Corpus, vecs: &[f32], dim: usize) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(out, "{} {dim}", corpus.vocab())?;
    for (w, row) in corpus.words.iter().zip(vecs.chunks_exact(dim)) {
        write!(out, "{w}")?;
        for x in row {
            write!(out, " {x:.6}")?;
        }
        writeln!(out)?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spearman_of_monotone_series_is_one_and_of_reversed_minus_one() {
        let a = [1.0, 2.0, 3.0, 4.0];
        assert!((spearman(&a, &[10.0, 20.0, 25.0, 100.0]) - 1.0).abs() < 1e-12);
        assert!((spearman(&a, &[4.0, 3.0, 2.0, 1.0]) + 1.0).abs() < 1e-12);
        assert_eq!(ranks(&[5.0, 1.0, 5.0]), vec![2.5, 1.0, 2.5]);
    }

    #[test]
    fn analogy_finds_the_parallel_word() {
        let words = ["a", "b", "c", "d", "e"];
        let corpus = Corpus::from_tokens(words.iter().copied(), 1).unwrap();
        // Every word occurs once: order is alphabetical. d = b - a + c exactly; e elsewhere.
        let vecs = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 2.0, -1.0, -1.0];
        let unit = normalized(&vecs, 2);
        let sets = EvalSets {
            analogies: vec![["a", "b", "c", "d"].map(String::from), ["a", "b", "c", "zz"].map(String::from)],
            pairs: vec![],
            simlex: vec![],
        };
        assert_eq!(analogy(&corpus, &unit, 2, &sets, 30_000), (1.0, 0.5));
        // No question with its four words in the vocabulary: nothing measured, not 0 %.
        let oov = EvalSets {
            analogies: vec![["a", "b", "c", "zz"].map(String::from)],
            pairs: vec![],
            simlex: vec![],
        };
        let (within, all) = analogy(&corpus, &unit, 2, &oov, 30_000);
        assert!(within.is_nan());
        assert_eq!(all, 0.0);
        let none = EvalSets { analogies: vec![], pairs: vec![], simlex: vec![] };
        let (within, all) = analogy(&corpus, &unit, 2, &none, 30_000);
        assert!(within.is_nan() && all.is_nan());
        assert_eq!(crate::task::figure(within, 4), "n/a");
        assert_eq!(crate::task::figure(0.25, 4), "0.2500");
    }
}

//! The text side of `parma train wv`: a corpus of whitespace-separated tokens, its vocabulary
//! (`min_count`, most frequent first), the evaluation sets (Google analogies, word-similarity
//! pairs) and a generated corpus with planted structure for tests.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::mix;

/// Why a corpus or an evaluation set could not be loaded.
#[derive(Debug)]
pub enum TextError {
    /// A file could not be read.
    Io(PathBuf, std::io::Error),
    /// A line is malformed: file, line from 1, what.
    At(PathBuf, usize, String),
    /// The corpus has no word that occurs `min_count` times.
    Empty(PathBuf, u32),
}

impl fmt::Display for TextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TextError::Io(p, e) => write!(f, "cannot read {}: {e}", p.display()),
            TextError::At(p, line, what) => write!(f, "{}:{line}: {what}", p.display()),
            TextError::Empty(p, m) => write!(f, "{}: no word occurs {m} times (--min-count)", p.display()),
        }
    }
}

impl std::error::Error for TextError {}

/// A corpus as word numbers, with its vocabulary.
#[derive(Clone, Debug)]
pub struct Corpus {
    /// The words, most frequent first (ties in byte order).
    pub words: Vec<String>,
    /// Their counts in the corpus.
    pub counts: Vec<u64>,
    /// The corpus, words below `min_count` left out (as word2vec does).
    pub tokens: Vec<u32>,
    /// Tokens of the text before the rare words were left out.
    pub raw_tokens: u64,
}

impl Corpus {
    /// Reads `file` (whitespace-separated tokens, taken as they are).
    pub fn load(file: &Path, min_count: u32) -> Result<Corpus, TextError> {
        let text = std::fs::read_to_string(file).map_err(|e| TextError::Io(file.to_path_buf(), e))?;
        Corpus::from_tokens(text.split_whitespace(), min_count)
            .ok_or(TextError::Empty(file.to_path_buf(), min_count))
    }

    /// The corpus of `tokens`; `None` if no word occurs `min_count` times.
    pub fn from_tokens<'t>(tokens: impl Iterator<Item = &'t str> + Clone, min_count: u32) -> Option<Corpus> {
        let mut counts: HashMap<&str, u64> = HashMap::new();
        let mut raw_tokens = 0;
        for t in tokens.clone() {
            *counts.entry(t).or_default() += 1;
            raw_tokens += 1;
        }
        let mut vocab: Vec<(&str, u64)> =
            counts.into_iter().filter(|(_, c)| *c >= u64::from(min_count)).collect();
        if vocab.is_empty() {
            return None;
        }
        vocab.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let index: HashMap<&str, u32> = vocab.iter().enumerate().map(|(i, (w, _))| (*w, i as u32)).collect();
        let tokens = tokens.filter_map(|t| index.get(t).copied()).collect();
        Some(Corpus {
            words: vocab.iter().map(|(w, _)| w.to_string()).collect(),
            counts: vocab.iter().map(|(_, c)| *c).collect(),
            tokens,
            raw_tokens,
        })
    }

    /// The vocabulary's size.
    pub fn vocab(&self) -> usize {
        self.words.len()
    }

    /// Word numbers by word.
    pub fn index(&self) -> HashMap<&str, u32> {
        self.words.iter().enumerate().map(|(i, w)| (w.as_str(), i as u32)).collect()
    }
}

/// Evaluation sets: analogy questions (`a b c d`: a is to b as c is to d, lower-cased, with
/// their section) and word pairs with a human similarity score.
#[derive(Clone, Debug, Default)]
pub struct EvalSets {
    /// Analogy questions.
    pub analogies: Vec<[String; 4]>,
    /// Word pairs and scores (WordSim-353, or the `--similarities` file).
    pub pairs: Vec<(String, String, f64)>,
    /// SimLex-999's pairs and scores, when fetched.
    pub simlex: Vec<(String, String, f64)>,
}

impl EvalSets {
    /// Reads Mikolov's `questions-words.txt` (`: section` lines, then four words a line).
    pub fn read_analogies(&mut self, file: &Path) -> Result<(), TextError> {
        let text = std::fs::read_to_string(file).map_err(|e| TextError::Io(file.to_path_buf(), e))?;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with(':') {
                continue;
            }
            let w: Vec<String> = line.split_whitespace().map(str::to_lowercase).collect();
            let q: [String; 4] = w.try_into().map_err(|w: Vec<String>| {
                TextError::At(file.to_path_buf(), i + 1, format!("expected 4 words, found {}", w.len()))
            })?;
            self.analogies.push(q);
        }
        Ok(())
    }

    /// Reads word pairs with a score (WordSim-353's `wordsim353.tsv`, SimLex's layout: two
    /// words then a number, tab- or space-separated; `#` comment lines and a header whose third
    /// field is not a number are skipped).
    pub fn read_pairs(&mut self, file: &Path) -> Result<(), TextError> {
        self.pairs.extend(pairs_of(file)?);
        Ok(())
    }

    /// Reads SimLex-999's pairs (`simlex999.txt`, the layout of [`EvalSets::read_pairs`]).
    pub fn read_simlex(&mut self, file: &Path) -> Result<(), TextError> {
        self.simlex.extend(pairs_of(file)?);
        Ok(())
    }
}

/// The word pairs of `file` (see [`EvalSets::read_pairs`]).
fn pairs_of(file: &Path) -> Result<Vec<(String, String, f64)>, TextError> {
    let mut pairs = Vec::new();
    let text = std::fs::read_to_string(file).map_err(|e| TextError::Io(file.to_path_buf(), e))?;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 3 {
            return Err(TextError::At(file.to_path_buf(), i + 1, "expected `word word score`".into()));
        }
        match f[2].parse::<f64>() {
            Ok(s) if s.is_finite() => pairs.push((f[0].to_lowercase(), f[1].to_lowercase(), s)),
            _ if i == 0 || pairs.is_empty() => {}
            _ => {
                return Err(TextError::At(
                    file.to_path_buf(),
                    i + 1,
                    format!("score `{}` is not a number", f[2]),
                ))
            }
        }
    }
    Ok(pairs)
}

/// A corpus with planted structure, for tests: `groups` groups of `per_group` words (word `j`
/// of group `g` is `g{g}w{j}`); each sentence of 12 tokens uses the words of one group only,
/// with a few filler words shared by every group. Words of one group share their contexts, so
/// trained vectors put them closer together than words of different groups. The evaluation
/// set scores same-group pairs 1 and cross-group pairs 0.
pub fn planted(groups: u32, per_group: u32, sentences: u32, seed: u64) -> (String, EvalSets) {
    let mut rng = StdRng::seed_from_u64(mix(seed));
    let mut text = String::new();
    for _ in 0..sentences {
        let g = rng.gen_range(0..groups);
        for _ in 0..12 {
            if rng.gen_bool(0.2) {
                text.push_str(&format!("the{} ", rng.gen_range(0..3)));
            } else {
                text.push_str(&format!("g{g}w{} ", rng.gen_range(0..per_group)));
            }
        }
        text.push('\n');
    }
    let mut sets = EvalSets::default();
    for g in 0..groups {
        for j in 1..per_group {
            sets.pairs.push((format!("g{g}w0"), format!("g{g}w{j}"), 1.0));
            sets.pairs.push((format!("g{g}w0"), format!("g{}w{j}", (g + 1) % groups), 0.0));
        }
    }
    (text, sets)
}

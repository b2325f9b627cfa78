#!/usr/bin/env python3
"""The gensim side of `parma train wv`, for docs/training.md: skip-gram with negative sampling
on the corpus `parma data fetch corpus` assembled, at the same settings (dim 100, window 5,
5 negatives, min_count 5, sample 1e-3, 5 epochs, lr 0.025 falling linearly, 2 threads), the
same evaluation (Google analogies over the 30,000 most frequent words, WordSim-353 and
SimLex-999 Spearman ρ).

    pip install gensim==4.4.0
    parma data fetch corpus && parma data fetch w2v-eval
    python3 scripts/wv_gensim.py [--workers 2] [--epochs 5] [--vectors FILE]

With --vectors FILE it evaluates vectors in word2vec text format instead (`parma train wv
--export FILE`), with gensim's own evaluation code.
"""
import argparse
import os
import time

from gensim.models import KeyedVectors, Word2Vec
from gensim.models.word2vec import LineSentence


def cache_dir():
    x = os.environ.get("XDG_CACHE_HOME")
    return os.path.join(x, "parma") if x else os.path.join(os.path.expanduser("~"), ".cache", "parma")


def evaluate(kv, what):
    ev = os.path.join(cache_dir(), "w2v-eval")
    score, _ = kv.evaluate_word_analogies(os.path.join(ev, "questions-words.txt"), restrict_vocab=30000)
    pearson, spearman, oov = kv.evaluate_word_pairs(os.path.join(ev, "wordsim353.tsv"))
    _, simlex, simlex_oov = kv.evaluate_word_pairs(os.path.join(ev, "simlex999.txt"))
    print(f"{what}: analogy {score:.4f}, WS353 rho {spearman.statistic:.4f} ({oov:.1f}% OOV), "
          f"SimLex-999 rho {simlex.statistic:.4f} ({simlex_oov:.1f}% OOV)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--vectors")
    a = p.parse_args()
    if a.vectors:
        evaluate(KeyedVectors.load_word2vec_format(a.vectors, binary=False), a.vectors)
        return
    corpus = os.path.join(cache_dir(), "corpus", "corpus.txt")
    began = time.time()
    m = Word2Vec(LineSentence(corpus), sg=1, negative=5, vector_size=100, window=5, min_count=5,
                 sample=1e-3, epochs=a.epochs, workers=a.workers, seed=a.seed, alpha=0.025)
    secs = time.time() - began
    print(f"gensim: {len(m.wv)} words, {secs:.1f} s for {a.epochs} epochs (with the vocabulary scan), "
          f"{secs / a.epochs:.1f} s per epoch")
    evaluate(m.wv, "gensim")


if __name__ == "__main__":
    main()

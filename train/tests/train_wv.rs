//! `parma train wv` on a generated corpus with planted structure (words of one group share
//! their contexts): after training, words of the same group must be closer than words of
//! different groups (Spearman ρ of the planted same-group scores against cosine similarity),
//! with negatives drawn by the sampling manager under each conformity level, on two nodes, and
//! on the baseline; bad options are refused.
#![forbid(unsafe_code)]

use parma::{Conformity, Technique};
use parma_train::harness::run;
use parma_train::task::Quality;
use parma_train::wv::corpus::{planted, Corpus};
use parma_train::wv::{WvOptions, WvTask};
use parma_train::{Engine, TrainOptions};

fn opts() -> TrainOptions {
    TrainOptions {
        nodes: 2,
        workers: 1,
        epochs: 3,
        dim: 16,
        lr: 0.05,
        seed: 9,
        eval_every: 0,
        ahead: 4,
        batch: 32,
        technique: Technique::Adaptive,
        gate: parma::Gate::Async,
        engine: Engine::Parma,
        progress: false,
        cluster: None,
        checkpoint: Default::default(),
        metrics: None,
        ..TrainOptions::default()
    }
}

/// Trains on 8 groups of 6 words and returns the similarity ρ after the last epoch.
fn rho(o: &TrainOptions, conformity: Conformity) -> f64 {
    let (text, sets) = planted(8, 6, 1000, 4);
    let corpus = Corpus::from_tokens(text.split_whitespace(), 1).unwrap();
    let wv = WvOptions { window: 3, negatives: 4, sample: 0.0, restrict: 1000 };
    let task = WvTask::new(&corpus, &sets, o, &wv);
    let r = run(&task, "planted", o, conformity).unwrap();
    let Some(Quality::Words { similarity, .. }) = r.last().test else { panic!("no test quality") };
    let (first, last) = (r.epochs[0].loss, r.last().loss);
    eprintln!("{o:?} {conformity:?}: rho {similarity:.3}, loss {first} -> {last}");
    assert!(last < first, "loss {first} -> {last}");
    let model = task.take_model().expect("the model after the last epoch");
    assert_eq!(model.len(), corpus.vocab() * o.dim);
    similarity
}

#[test]
fn related_words_end_up_closer_on_two_nodes_under_every_conformity() {
    for c in Conformity::ALL {
        let r = rho(&opts(), c);
        // Same-group pairs are scored 1, cross-group 0: a model that learned nothing has ρ ≈ 0,
        // one that separates the groups perfectly ρ ≈ 0.87 (half the pairs tie at each score).
        assert!(r > 0.6, "{c:?}: rho {r}");
    }
}

#[test]
fn related_words_end_up_closer_on_the_baseline() {
    let r = rho(&TrainOptions { engine: Engine::Hogwild, ..opts() }, Conformity::Conform);
    assert!(r > 0.6, "rho {r}");
}

#[test]
fn bad_wv_options_are_refused() {
    for bad in [
        WvOptions { window: 0, ..WvOptions::default() },
        WvOptions { negatives: 0, ..WvOptions::default() },
        WvOptions { sample: -1.0, ..WvOptions::default() },
        WvOptions { restrict: 0, ..WvOptions::default() },
    ] {
        assert!(bad.check().is_err(), "{bad:?}");
    }
}

//! `parma train lr` on a generated table with planted weights: logistic regression must beat
//! the base rate's AUC of 0.5 by a wide margin with both optimizers, on parma (two nodes, and
//! with crosses) and on the baseline; a one-node one-worker run is reproducible bit for bit; bad
//! options are refused.
#![forbid(unsafe_code)]

use parma::Technique;
use parma_train::harness::run_lr;
use parma_train::lr::data::{planted, LrData};
use parma_train::lr::{LrOptions, Optimizer};
use parma_train::task::Quality;
use parma_train::{Engine, TrainError, TrainOptions};

fn opts() -> TrainOptions {
    TrainOptions {
        nodes: 2,
        workers: 1,
        epochs: 6,
        lr: 0.2,
        seed: 3,
        eval_every: 0,
        ahead: 4,
        batch: 16,
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

/// 3,000 rows of 5 fields with 12 values each. The planted weights give a Bayes-optimal AUC
/// of about 0.9; a model that learns nothing scores 0.5.
fn data(crosses: bool) -> LrData {
    LrData::hash(&planted(3000, 5, 12, 7), 12, crosses)
}

fn learns(o: &TrainOptions, lr: &LrOptions, crosses: bool) {
    let r = run_lr(&data(crosses), "planted", o, lr).unwrap();
    let (first, last) = (r.epochs[0].loss, r.last().loss);
    let Some(Quality::Classification { auc, logloss }) = r.last().test else { panic!("no test quality") };
    eprintln!("{o:?} {lr:?} crosses {crosses}: AUC {auc:.3}, log loss {logloss:.3}, loss {first} -> {last}");
    assert!(auc > 0.75, "{o:?} {lr:?}: AUC {auc}");
    assert!(logloss < 0.62, "{o:?} {lr:?}: log loss {logloss} (ln 2 = 0.693 knows nothing)");
    assert!(last < first, "{o:?} {lr:?}: loss {first} -> {last}");
}

#[test]
fn adagrad_learns_on_two_nodes() {
    learns(&opts(), &LrOptions::default(), false);
}

#[test]
fn ftrl_with_crosses_learns_on_two_nodes() {
    let lr = LrOptions { optimizer: Optimizer::Ftrl, l1: 0.5, l2: 1.0, beta: 1.0 };
    learns(&opts(), &lr, true);
}

#[test]
fn lr_on_the_baseline_learns() {
    learns(&TrainOptions { engine: Engine::Hogwild, ..opts() }, &LrOptions::default(), false);
}

#[test]
fn lr_one_node_one_worker_is_reproducible_bit_for_bit() {
    let o = TrainOptions { nodes: 1, workers: 1, epochs: 2, ..opts() };
    let d = data(false);
    let run = || run_lr(&d, "planted", &o, &LrOptions::default()).unwrap();
    let (a, b) = (run(), run());
    assert_eq!(a.checksum, b.checksum);
    assert_eq!(a.last().test, b.last().test);
}

#[test]
fn bad_lr_options_are_refused() {
    let d = data(false);
    for bad in [
        LrOptions { l2: -1.0, ..LrOptions::default() },
        LrOptions { l1: 1.0, ..LrOptions::default() },
        LrOptions { beta: f32::NAN, optimizer: Optimizer::Ftrl, ..LrOptions::default() },
    ] {
        assert!(matches!(run_lr(&d, "x", &opts(), &bad), Err(TrainError::Options(_))), "{bad:?}");
    }
}

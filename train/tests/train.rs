//! `parma train kge` on a small generated knowledge graph with planted structure, and `parma
//! train mf` on a generated low-rank rating matrix: the model must learn (loss falls, MRR far
//! above a random model's, RMSE far below the mean's) on parma and on the baseline, a one-node
//! one-worker run is reproducible bit for bit, and bad options are refused.
#![forbid(unsafe_code)]

use parma::{Conformity, Technique};
use parma_train::harness::{run_kge, run_mf};
use parma_train::kg::{Kg, Triple};
use parma_train::kge::{Loss, Model, Reg, RegOn};
use parma_train::mf::{MfOptions, MfTask, Rating, Ratings};
use parma_train::nodes::LocalTransport;
use parma_train::{Engine, KgeOptions, TrainError, TrainOptions};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

const ENTITIES: u32 = 48;
const GROUPS: u32 = 8;
const RELATIONS: u32 = 4;

/// 48 entities in 8 groups of 6 (entity `e` is in group `e % 8`); relation `r` links every
/// entity of group `g` to 3 random entities of group `(3g + r + 1) % 8`. 576 triples, split
/// 480 / 48 / 48. A model that learns the groups ranks a held-out tail among the 6 entities of
/// its target group (fewer after filtering); a random model among all 48.
fn planted() -> Kg {
    let mut rng = StdRng::seed_from_u64(17);
    let mut all = Vec::new();
    for h in 0..ENTITIES {
        for r in 0..RELATIONS {
            let target = (3 * (h % GROUPS) + r + 1) % GROUPS;
            let mut members: Vec<u32> = (0..ENTITIES).filter(|e| e % GROUPS == target).collect();
            members.shuffle(&mut rng);
            for &t in &members[..3] {
                all.push(Triple { head: h, rel: r, tail: t });
            }
        }
    }
    all.shuffle(&mut rng);
    let test = all.split_off(all.len() - 48);
    let valid = all.split_off(all.len() - 48);
    Kg::from_triples(ENTITIES, RELATIONS, all, valid, test)
}

/// The expected MRR of a model that ranks uniformly at random among `n` candidates: `H_n / n`,
/// which falls as `n` grows.
fn random_mrr(n: u32) -> f64 {
    (1..=n).map(|k| 1.0 / f64::from(k)).sum::<f64>() / f64::from(n)
}

fn opts() -> TrainOptions {
    TrainOptions {
        nodes: 2,
        transport: LocalTransport::Threaded,
        workers: 1,
        epochs: 20,
        dim: 32,
        lr: 0.1,
        seed: 5,
        eval_every: 0,
        ahead: 4,
        batch: 16,
        sync_every: 0,
        lockstep: false,
        technique: Technique::Adaptive,
        gate: parma::Gate::Async,
        engine: Engine::Parma,
        progress: false,
        cluster: None,
        checkpoint: Default::default(),
        ..TrainOptions::default()
    }
}

fn kge() -> KgeOptions {
    KgeOptions {
        model: Model::ComplEx,
        negatives: 4,
        shared_negatives: false,
        loss: Loss::Bce,
        reg: Reg::L2(1e-3),
        reg_on: RegOn::Positives,
        conformity: Conformity::Conform,
        init_std: 0.1,
    }
}

/// Trains and requires the loss to fall and MRR on valid and test to exceed `factor` times a
/// random model's.
fn learns(opts: &TrainOptions, kge: &KgeOptions, factor: f64) {
    let kg = planted();
    let r = run_kge(&kg, "planted", opts, kge).unwrap();
    assert_eq!(r.epochs.len(), opts.epochs as usize);
    let (first, last) = (r.epochs[0].loss, r.last().loss);
    assert!(last < 0.6 * first, "{opts:?} {kge:?}: loss {first} -> {last}");
    let test = r.last().test.and_then(|q| q.ranking()).expect("tested after the last epoch");
    let valid = r.last().valid.and_then(|q| q.ranking()).expect("validated after the last epoch");
    // Filtering leaves at least 42 candidates per query here (at most 6 known answers), so a
    // random model's MRR is below H_40 / 40 ≈ 0.107. Learning the groups gives about 0.5 with
    // ComplEx; DistMult, whose scores are symmetric in head and tail, cannot tell the direction
    // of these relations and gets about 0.3 to 0.45.
    let random = random_mrr(40);
    eprintln!("{opts:?} {kge:?}: valid MRR {:.3}, test MRR {:.3}", valid.mrr, test.mrr);
    assert!(
        test.mrr > factor * random && valid.mrr > factor * random,
        "{opts:?} {kge:?}: test {test:?}, random {random}"
    );
    assert!(test.hits10 > 0.8, "{test:?}");
}

#[test]
fn complex_learns_on_two_nodes() {
    learns(&opts(), &kge(), 3.5);
}

/// The same over ZeroMQ on 127.0.0.1: each node's driver on its transport's I/O thread.
#[test]
fn complex_learns_on_two_nodes_over_zeromq() {
    learns(&TrainOptions { transport: LocalTransport::Zmq, ..opts() }, &kge(), 3.5);
}

#[test]
fn distmult_with_n3_and_pooled_negatives_learns() {
    let kge =
        KgeOptions { model: Model::DistMult, reg: Reg::N3(1e-3), conformity: Conformity::Bounded, ..kge() };
    learns(&TrainOptions { technique: Technique::StaticPartitioning, epochs: 40, ..opts() }, &kge, 2.5);
}

#[test]
fn softmax_over_shared_negatives_learns() {
    // The CoDEx-S settings in miniature: cross-entropy against candidates shared by the step,
    // N3 once per triple, small initialization.
    let kge = KgeOptions {
        negatives: 24,
        shared_negatives: true,
        loss: Loss::Softmax,
        reg: Reg::N3(1e-2),
        init_std: 1e-3,
        ..kge()
    };
    learns(&opts(), &kge, 3.5);
    // DistMult cannot tell these relations' direction (about 0.26 to 0.45 here, and Hogwild!'s
    // two threads make the run vary): twice a random model's MRR still tells learning apart.
    let distmult = KgeOptions { model: Model::DistMult, loss: Loss::Bce, ..kge };
    learns(&TrainOptions { engine: Engine::Hogwild, ..opts() }, &distmult, 2.0);
}

#[test]
fn lockstep_and_bounded_staleness_learn() {
    // Seven parts of 69 and one of 66 triples: 23 and 22 steps of 3, so the thread with the
    // small part passes the barriers of the step it lacks.
    let lockstep = TrainOptions { nodes: 1, workers: 7, batch: 3, lockstep: true, ..opts() };
    learns(&lockstep, &kge(), 3.5);
    learns(&TrainOptions { engine: Engine::Hogwild, ..lockstep }, &kge(), 3.5);
    learns(&TrainOptions { sync_every: 2, ..opts() }, &kge(), 3.5);
}

#[test]
fn training_under_clock_gates_learns() {
    // Seven threads over seven nodes: six parts of 69 triples and one of 66, so 23 steps of 3
    // and 22; the thread with a step less pads its clock, or BSP would wait for a step that
    // never comes. Ten epochs were too few: over 36 seeds the worst of valid and test MRR fell
    // to 0.37 (3.5 × random is 0.374); with twenty, the worst of 108 runs (36 seeds × 3 gates)
    // was 0.445.
    let uneven = TrainOptions { nodes: 7, workers: 1, batch: 3, ..opts() };
    learns(&TrainOptions { gate: parma::Gate::Bsp, ..uneven.clone() }, &kge(), 3.5);
    learns(&TrainOptions { gate: parma::Gate::Ssp { staleness: 2 }, ..uneven.clone() }, &kge(), 3.5);
    let static_bd = TrainOptions { technique: Technique::StaticPartitioning, ..uneven };
    learns(&TrainOptions { gate: parma::Gate::BoundedDelay { delay: 0 }, ..static_bd }, &kge(), 3.5);
}

#[test]
fn relocation_and_local_sampling_learn() {
    let kge = KgeOptions { conformity: Conformity::NonConform, ..kge() };
    learns(&TrainOptions { technique: Technique::Relocation, ..opts() }, &kge, 3.5);
}

#[test]
fn the_baseline_learns() {
    learns(&TrainOptions { engine: Engine::Hogwild, ..opts() }, &kge(), 3.5);
}

#[test]
fn one_node_one_worker_is_reproducible_bit_for_bit() {
    let kg = planted();
    let o = TrainOptions { nodes: 1, workers: 1, epochs: 3, eval_every: 1, ..opts() };
    let run = |o: &TrainOptions| run_kge(&kg, "planted", o, &kge()).unwrap();
    let (a, b) = (run(&o), run(&o));
    assert_eq!(a.checksum, b.checksum);
    let bits = |r: &parma_train::report::RunReport| -> Vec<(u64, Option<u64>)> {
        r.epochs.iter().map(|e| (e.loss.to_bits(), e.valid.map(|v| v.primary().to_bits()))).collect()
    };
    assert_eq!(bits(&a), bits(&b));
    // The checksum does tell models apart.
    let c = run(&TrainOptions { seed: 6, ..o });
    assert_ne!(a.checksum, c.checksum);
}

#[test]
fn bad_options_are_refused_before_anything_starts() {
    let kg = planted();
    let bad_common = [
        TrainOptions { nodes: 0, ..opts() },
        TrainOptions { workers: 0, ..opts() },
        TrainOptions { epochs: 0, ..opts() },
        TrainOptions { dim: 0, ..opts() },
        TrainOptions { lr: -0.1, ..opts() },
        TrainOptions { lr: f32::NAN, ..opts() },
        TrainOptions { batch: 0, ..opts() },
        TrainOptions { ahead: 5000, ..opts() },
        TrainOptions { sync_every: 1 << 21, ..opts() },
    ];
    for o in bad_common {
        let e = run_kge(&kg, "planted", &o, &kge()).unwrap_err();
        assert!(matches!(e, TrainError::Options(_)), "{o:?}: {e}");
        assert!(e.to_string().starts_with("bad options: --"), "{e}");
    }
    let bad_kge = [
        (TrainOptions { dim: 33, ..opts() }, kge()),
        (opts(), KgeOptions { negatives: 0, ..kge() }),
        (opts(), KgeOptions { negatives: 1025, ..kge() }),
        (opts(), KgeOptions { negatives: 1 << 17, shared_negatives: true, ..kge() }),
        (opts(), KgeOptions { init_std: 0.0, ..kge() }),
    ];
    for (o, k) in bad_kge {
        let e = run_kge(&kg, "planted", &o, &k).unwrap_err();
        assert!(matches!(e, TrainError::Options(_)), "{k:?}: {e}");
    }
    let tiny = Kg::from_triples(2, 1, vec![Triple { head: 0, rel: 0, tail: 1 }], vec![], vec![]);
    let e = run_kge(&tiny, "tiny", &opts(), &kge()).unwrap_err();
    assert!(e.to_string().contains("1 training examples cannot feed 2 threads"), "{e}");
}

/// 120 users × 90 items, ratings `3 + <u, v>` with rank-2 factors of size about 1, plus small
/// noise, rounded to halves and clipped to [1, 5]; 4,000 of the 10,800 cells observed.
fn low_rank() -> Ratings {
    let mut rng = StdRng::seed_from_u64(29);
    let normal = rand_distr::Normal::new(0.0f32, 1.0).unwrap();
    use rand_distr::Distribution;
    let (users, items) = (120u32, 90u32);
    let uf: Vec<[f32; 2]> = (0..users).map(|_| [normal.sample(&mut rng), normal.sample(&mut rng)]).collect();
    let vf: Vec<[f32; 2]> = (0..items).map(|_| [normal.sample(&mut rng), normal.sample(&mut rng)]).collect();
    let mut cells: Vec<(u32, u32)> = (0..users).flat_map(|u| (0..items).map(move |i| (u, i))).collect();
    cells.shuffle(&mut rng);
    let all = cells[..4000]
        .iter()
        .map(|&(u, i)| {
            let (a, b) = (uf[u as usize], vf[i as usize]);
            let r = 3.0 + a[0] * b[0] + a[1] * b[1] + 0.1 * normal.sample(&mut rng);
            Rating { user: u, item: i, value: ((r * 2.0).round() / 2.0).clamp(1.0, 5.0) }
        })
        .collect();
    Ratings::split(users, items, all, parma_train::mf::SPLIT_SEED)
}

fn mf_opts() -> TrainOptions {
    TrainOptions { epochs: 30, dim: 8, lr: 0.02, eval_every: 10, batch: 16, ..opts() }
}

fn mf_learns(o: &TrainOptions) {
    let data = low_rank();
    let mf = MfOptions { reg: 0.02, init_std: 0.1 };
    let mean = MfTask::new(&data, o, &mf).mean_rmse();
    let r = run_mf(&data, "low-rank", o, &mf).unwrap();
    let (first, last) = (r.epochs[0].loss, r.last().loss);
    assert!(last < 0.5 * first, "{o:?}: loss {first} -> {last}");
    let rmse = r.last().test.unwrap().primary();
    // No validation split: every evaluation (epochs 10, 20, 30) is of the test ratings, and
    // recorded as test.
    let tested: Vec<u32> = r.epochs.iter().filter(|e| e.test.is_some()).map(|e| e.epoch).collect();
    assert_eq!(tested, [10, 20, 30], "{o:?}");
    assert!(r.epochs.iter().all(|e| e.valid.is_none()), "{o:?}");
    eprintln!("{o:?}: test RMSE {rmse:.3}, the mean's {mean:.3}");
    // The mean's RMSE is about 1.0 here; the factors explain most of the variance (about 0.3).
    assert!(rmse < 0.7 * mean, "{o:?}: test RMSE {rmse}, the mean's {mean}");
}

#[test]
fn mf_beats_the_mean_on_two_nodes() {
    mf_learns(&mf_opts());
}

#[test]
fn mf_on_the_baseline_beats_the_mean() {
    mf_learns(&TrainOptions { engine: Engine::Hogwild, ..mf_opts() });
}

#[test]
fn mf_one_node_one_worker_is_reproducible_bit_for_bit() {
    let data = low_rank();
    let o = TrainOptions { nodes: 1, workers: 1, epochs: 3, ..mf_opts() };
    let run = |o: &TrainOptions| run_mf(&data, "low-rank", o, &MfOptions::default()).unwrap();
    let (a, b) = (run(&o), run(&o));
    assert_eq!(a.checksum, b.checksum);
    assert_eq!(a.last().test.unwrap().primary().to_bits(), b.last().test.unwrap().primary().to_bits());
    assert_ne!(a.checksum, run(&TrainOptions { seed: 9, ..o.clone() }).checksum);
    let bad = MfOptions { reg: -1.0, ..MfOptions::default() };
    assert!(matches!(run_mf(&data, "x", &o, &bad), Err(TrainError::Options(_))));
}

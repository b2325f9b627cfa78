//! How a training run's threads wait for each other: an evaluation that outlasts the
//! request timeout (and, across processes, the peer timeout) does not fail the workers
//! waiting for it, in one process or in two; and the first worker to fail stops the others at
//! once, the run returning its error.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use parma_core::{Conformity, Key, OpError};
use parma_train::eval::RankSums;
use parma_train::harness::{run, run_kge};
use parma_train::kg::{Kg, Triple};
use parma_train::kge::KgeTask;
use parma_train::params::NegSampler;
use parma_train::task::{Quality, StepBuffers, Task};
use parma_train::{KgeOptions, TrainError, TrainOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod common;

/// Entities of the generated graph: enough that one evaluation pass (filtered ranking of 800
/// triples against every entity) takes about a second on this project's machines.
const ENTITIES: u32 = 40_000;
const RELATIONS: u32 = 4;

/// Random distinct triples over [`ENTITIES`]: 8,000 to train on, 800 each to validate and
/// test (nothing to learn: the test is about time, not quality).
fn generated() -> Kg {
    let mut rng = StdRng::seed_from_u64(45);
    let mut seen = std::collections::HashSet::new();
    let mut all = Vec::new();
    while all.len() < 9_600 {
        let t = Triple {
            head: rng.gen_range(0..ENTITIES),
            rel: rng.gen_range(0..RELATIONS),
            tail: rng.gen_range(0..ENTITIES),
        };
        if seen.insert(t) {
            all.push(t);
        }
    }
    let test = all.split_off(8_800);
    let valid = all.split_off(8_000);
    Kg::from_triples(ENTITIES, RELATIONS, all, valid, test)
}

/// [`generated`] as a directory in LibKGE's layout, for `parma train kge --data DIR`.
fn generated_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("parma-train-waits-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let kg = generated();
    let write = |file: &str, triples: &[Triple]| {
        let text: String =
            triples.iter().map(|t| format!("e{}\tr{}\te{}\n", t.head, t.rel, t.tail)).collect();
        std::fs::write(dir.join(file), text).unwrap();
    };
    write("train.txt", &kg.train);
    write("valid.txt", &kg.valid);
    write("test.txt", &kg.test);
    dir
}

fn kge() -> KgeOptions {
    KgeOptions { negatives: 4, ..KgeOptions::default() }
}

const REQUEST_TIMEOUT: Duration = Duration::from_millis(200);

fn opts(nodes: u16, workers: u16) -> TrainOptions {
    TrainOptions {
        nodes,
        workers,
        epochs: 2,
        dim: 64,
        eval_every: 1,
        request_timeout: Some(REQUEST_TIMEOUT),
        ..TrainOptions::default()
    }
}

/// Two workers, on one node or on two, evaluate their shares between the epoch's barriers for
/// longer than the request timeout (the one done first waits in a barrier for the other); the
/// run finishes.
#[test]
fn an_evaluation_longer_than_the_request_timeout_fails_nothing() {
    let kg = generated();
    for (nodes, workers) in [(1, 2), (2, 1)] {
        let o = opts(nodes, workers);
        let report =
            run_kge(&kg, "generated", &o, &kge()).unwrap_or_else(|e| panic!("{nodes} x {workers}: {e}"));
        assert_eq!(report.epochs.len(), 2);
        assert!(report.last().test.is_some(), "no test figures");
        // The test means something only if a pass outlasts the timeout (two valid passes and
        // one test pass).
        let per_pass = report.eval_secs / 3.0;
        assert!(
            per_pass > REQUEST_TIMEOUT.as_secs_f64(),
            "an evaluation pass took {per_pass:.3} s, less than the request timeout: make the graph larger"
        );
    }
}

/// The same with two node processes over ZeroMQ, the peer timeout (500 ms) shorter than an
/// evaluation pass (about a second here):
/// the node that waits in the barrier hears heartbeats, not silence.
#[test]
fn an_evaluation_longer_than_the_timeouts_fails_no_process() {
    let dir = generated_dir("processes");
    let data = dir.to_str().expect("a UTF-8 path");
    let out = common::parma(&[
        "launch",
        "--nodes",
        "2",
        "--",
        "node",
        "--peer-timeout-ms",
        "500",
        "train",
        "kge",
        "--data",
        data,
        "--workers",
        "1",
        "--epochs",
        "2",
        "--eval-every",
        "1",
        "--dim",
        "64",
        "--negatives",
        "4",
        "--request-timeout",
        "0.2",
    ]);
    let all = common::text(&out);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "parma launch failed: {}\n{all}", out.status);
    assert!(all.contains("[1] node 1 of 2: trained its 1 workers' part of 2 epochs"), "{all}");
    let secs = evaluation_secs(&all);
    eprintln!("three evaluation passes took {secs:.2} s");
    assert!(
        secs / 3.0 > 0.5,
        "an evaluation pass took {:.3} s, less than the peer timeout:\n{all}",
        secs / 3.0
    );
}

/// The seconds `done: ... evaluation N s` reports on rank 0.
fn evaluation_secs(all: &str) -> f64 {
    let line =
        all.lines().find(|l| l.starts_with("[0] done: ")).unwrap_or_else(|| panic!("no report:\n{all}"));
    let at = line.find("evaluation ").unwrap_or_else(|| panic!("no evaluation time: {line}"));
    let rest = &line[at + "evaluation ".len()..];
    rest.split(' ').next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("not a number: {line}"))
}

/// A KGE task whose `fail_at`-th step (over all threads) names a key outside the model, so
/// that the thread announcing it fails; records when.
struct FailingTask<'a> {
    inner: KgeTask<'a>,
    steps: AtomicU64,
    fail_at: u64,
    failed_at: Mutex<Option<Instant>>,
}

impl Task for FailingTask<'_> {
    type Example = Triple;
    type Partial = RankSums;
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn model_name(&self) -> &'static str {
        self.inner.model_name()
    }
    fn train(&self) -> &[Triple] {
        self.inner.train()
    }
    fn keys(&self) -> u64 {
        self.inner.keys()
    }
    fn value_len(&self) -> usize {
        self.inner.value_len()
    }
    fn init(&self, seed: u64, key: u64, out: &mut [f32]) {
        self.inner.init(seed, key, out)
    }
    fn keys_of(&self, examples: &[Triple], keys: &mut Vec<Key>) {
        self.inner.keys_of(examples, keys);
        if self.steps.fetch_add(1, SeqCst) == self.fail_at {
            keys.push(Key(self.inner.keys()));
            *self.failed_at.lock().unwrap() = Some(Instant::now());
        }
    }
    fn negatives(&self, examples: usize) -> Option<(u64, usize)> {
        self.inner.negatives(examples)
    }
    fn negative_sampler(&self) -> Option<NegSampler> {
        self.inner.negative_sampler()
    }
    fn step(&self, examples: &[Triple], b: &mut StepBuffers) -> f64 {
        self.inner.step(examples, b)
    }
    fn eval_len(&self, test: bool) -> usize {
        self.inner.eval_len(test)
    }
    fn evaluate_part(&self, view: &[f32], test: bool, part: std::ops::Range<usize>) -> RankSums {
        self.inner.evaluate_part(view, test, part)
    }
    fn merge(&self, view: &[f32], test: bool, parts: Vec<RankSums>) -> Quality {
        self.inner.merge(view, test, parts)
    }
    fn access_counts(&self) -> Vec<(Key, u64)> {
        self.inner.access_counts()
    }
}

/// One of two workers fails mid-epoch: the other stops within a second instead of waiting
/// in the epoch barrier, and the run returns the failed worker's error, not a consequence.
#[test]
fn the_first_failed_worker_stops_the_others_at_once() {
    let kg = generated();
    for (nodes, workers) in [(1, 2), (2, 1)] {
        let mut o = opts(nodes, workers);
        o.epochs = 50;
        // Were the others not stopped, they would wait this long in the barrier and fail the
        // test below, rather than hang.
        o.barrier_timeout = Some(Duration::from_secs(30));
        let kge = kge();
        let task = FailingTask {
            inner: KgeTask::new(&kg, &o, &kge),
            steps: AtomicU64::new(0),
            fail_at: 300,
            failed_at: Mutex::new(None),
        };
        let got = run(&task, "generated", &o, Conformity::Conform);
        let ended = Instant::now();
        let failed_at = task.failed_at.lock().unwrap().expect("the failing step was reached");
        match got {
            Err(TrainError::Worker { error: OpError::KeyOutsideLayout { key }, .. }) => {
                assert_eq!(key, Key(task.inner.keys()))
            }
            other => panic!("{nodes} x {workers}: not the failed worker's error: {other:?}"),
        }
        let took = ended - failed_at;
        eprintln!("{nodes} x {workers}: the run ended {took:?} after the failure");
        assert!(
            took < Duration::from_secs(1),
            "{nodes} x {workers}: the run ended {took:?} after the failure"
        );
    }
}

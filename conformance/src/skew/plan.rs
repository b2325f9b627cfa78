//! The key sequences of the skewed tasks: which keys every worker touches in every step, drawn
//! up front from the seed, so that workers can signal intent (or localize) ahead of time and
//! every technique sees exactly the same accesses.

use std::collections::HashSet;

use parma_core::Key;

use crate::rng::Rng;

/// A knowledge-graph-embedding-like task (AdaPM's KGE, adapm-cikm23.txt App. C): entity and
/// relation embeddings. A step trains on a batch of (head, relation, tail) triples whose entities
/// and relations follow Zipf laws, plus negative entities drawn uniformly (independent
/// sampling; AdaPM used local sampling, which only draws keys the node holds).
#[derive(Clone, Debug, PartialEq)]
pub struct Kge {
    /// Entity keys: `0..entities`.
    pub entities: u64,
    /// Relation keys: `entities..entities + relations`.
    pub relations: u64,
    /// Zipf exponent of entity popularity.
    pub entity_zipf: f64,
    /// Zipf exponent of relation popularity.
    pub relation_zipf: f64,
    /// Triples per batch.
    pub triples: u32,
    /// Uniformly drawn negative entities per batch.
    pub negatives: u32,
}

impl Default for Kge {
    fn default() -> Kge {
        Kge {
            entities: 50_000,
            relations: 200,
            entity_zipf: 1.1,
            relation_zipf: 1.5,
            triples: 16,
            negatives: 32,
        }
    }
}

/// A matrix-factorization-like task with row locality (AdaPM's MF, adapm-cikm23.txt App. C):
/// row and column factors. The data is partitioned by row: each worker owns a fixed share of the
/// rows and only ever touches those. A step trains on a batch of cells whose row is drawn
/// uniformly from the worker's rows and whose column follows a Zipf law.
#[derive(Clone, Debug, PartialEq)]
pub struct Mf {
    /// Row keys: `0..rows`.
    pub rows: u64,
    /// Column keys: `rows..rows + cols`.
    pub cols: u64,
    /// Zipf exponent of column popularity.
    pub col_zipf: f64,
    /// Cells per batch.
    pub cells: u32,
}

impl Default for Mf {
    fn default() -> Mf {
        Mf { rows: 32_000, cols: 8_000, col_zipf: 1.1, cells: 64 }
    }
}

/// The task a workload runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Task {
    Kge(Kge),
    Mf(Mf),
}

impl Task {
    /// The task's short name (`kge`, `mf`).
    pub fn name(&self) -> &'static str {
        match self {
            Task::Kge(_) => "kge",
            Task::Mf(_) => "mf",
        }
    }

    /// Keys of the model.
    pub fn keys(&self) -> u64 {
        match self {
            Task::Kge(k) => k.entities + k.relations,
            Task::Mf(m) => m.rows + m.cols,
        }
    }
}

/// Ranks `1..=n` drawn with probability ∝ `rank^-s`, by inverse transform over the exact
/// cumulative weights (`n` floats).
#[derive(Clone, Debug)]
pub struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    /// The law over `n ≥ 1` ranks with exponent `s ≥ 0` (0 is uniform).
    pub fn new(n: u64, s: f64) -> Zipf {
        assert!(n >= 1 && s >= 0.0, "Zipf needs n >= 1 and s >= 0");
        let mut sum = 0.0;
        let cumulative = (1..=n)
            .map(|r| {
                sum += (r as f64).powf(-s);
                sum
            })
            .collect();
        Zipf { cumulative }
    }

    /// A rank in `0..n` (0 is the most popular).
    pub fn draw(&self, rng: &mut Rng) -> u64 {
        let total = *self.cumulative.last().unwrap_or(&0.0);
        let u = unit(rng) * total;
        let i = self.cumulative.partition_point(|c| *c <= u);
        i.min(self.cumulative.len() - 1) as u64
    }
}

/// Uniform in `[0, 1)`.
fn unit(rng: &mut Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// `0..n` in a random order (Fisher–Yates).
fn permutation(n: u64, rng: &mut Rng) -> Vec<u64> {
    let mut p: Vec<u64> = (0..n).collect();
    for i in (1..p.len()).rev() {
        let j = rng.range(0, i as u64) as usize;
        p.swap(i, j);
    }
    p
}

/// The keys of every step of every worker.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Keys of the model: `0..keys`.
    pub keys: u64,
    /// `batches[worker][step]`: the distinct keys of that step, in first-use order. Workers are
    /// numbered node-major (`node * workers_per_node + worker`).
    pub batches: Vec<Vec<Vec<Key>>>,
}

impl Plan {
    /// The plan of `task` for `workers` workers of `steps` steps each, from `seed`.
    pub fn new(task: &Task, workers: usize, steps: u32, seed: u64) -> Plan {
        Plan::with_negatives(task, workers, steps, seed, true)
    }

    /// [`Plan::new`], with the KGE task's negatives left out of the batches if
    /// `keep_negatives` is false (they are still drawn, so the other keys are the same).
    pub fn with_negatives(task: &Task, workers: usize, steps: u32, seed: u64, keep_negatives: bool) -> Plan {
        let mut rng = Rng::new(seed ^ 0x5e3d_91a2_c4b7_0f68);
        let batches = match task {
            Task::Kge(k) => kge(k, workers, steps, &mut rng, keep_negatives),
            Task::Mf(m) => mf(m, workers, steps, &mut rng),
        };
        Plan { keys: task.keys(), batches }
    }

    /// How often each key is accessed over the whole plan (the statistics NuPS's heuristic
    /// reads from the training data), for the keys accessed at all.
    pub fn frequencies(&self) -> Vec<(Key, u64)> {
        let mut count = vec![0u64; self.keys as usize];
        for k in self.batches.iter().flatten().flatten() {
            count[k.0 as usize] += 1;
        }
        count.into_iter().enumerate().filter(|(_, c)| *c > 0).map(|(k, c)| (Key(k as u64), c)).collect()
    }

    /// Key accesses of one pass over the plan (a pull and a push per key and step).
    pub fn key_accesses(&self) -> u64 {
        2 * self.batches.iter().flatten().map(|b| b.len() as u64).sum::<u64>()
    }
}

/// Collects keys without duplicates, keeping the order of first use.
#[derive(Default)]
struct Batch {
    keys: Vec<Key>,
    seen: HashSet<Key>,
}

impl Batch {
    fn add(&mut self, k: Key) {
        if self.seen.insert(k) {
            self.keys.push(k);
        }
    }
}

fn kge(k: &Kge, workers: usize, steps: u32, rng: &mut Rng, keep_negatives: bool) -> Vec<Vec<Vec<Key>>> {
    let entity_of = permutation(k.entities, rng);
    let relation_of = permutation(k.relations, rng);
    let entities = Zipf::new(k.entities, k.entity_zipf);
    let relations = Zipf::new(k.relations, k.relation_zipf);
    (0..workers)
        .map(|_| {
            let mut w = Rng::new(rng.next_u64());
            (0..steps)
                .map(|_| {
                    let mut b = Batch::default();
                    for _ in 0..k.triples {
                        b.add(Key(entity_of[entities.draw(&mut w) as usize]));
                        b.add(Key(k.entities + relation_of[relations.draw(&mut w) as usize]));
                        b.add(Key(entity_of[entities.draw(&mut w) as usize]));
                    }
                    for _ in 0..k.negatives {
                        let n = Key(w.range(0, k.entities - 1));
                        if keep_negatives {
                            b.add(n);
                        }
                    }
                    b.keys
                })
                .collect()
        })
        .collect()
}

fn mf(m: &Mf, workers: usize, steps: u32, rng: &mut Rng) -> Vec<Vec<Vec<Key>>> {
    let row_of = permutation(m.rows, rng);
    let col_of = permutation(m.cols, rng);
    let cols = Zipf::new(m.cols, m.col_zipf);
    let share = (m.rows / workers as u64).max(1);
    (0..workers)
        .map(|g| {
            let mut w = Rng::new(rng.next_u64());
            let first = (g as u64 * share).min(m.rows - 1);
            let last = (first + share - 1).min(m.rows - 1);
            (0..steps)
                .map(|_| {
                    let mut b = Batch::default();
                    for _ in 0..m.cells {
                        b.add(Key(row_of[w.range(first, last) as usize]));
                        b.add(Key(m.rows + col_of[cols.draw(&mut w) as usize]));
                    }
                    b.keys
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_prefers_low_ranks_and_stays_in_range() {
        let z = Zipf::new(1000, 1.1);
        let mut rng = Rng::new(1);
        let mut count = vec![0u32; 1000];
        for _ in 0..100_000 {
            count[z.draw(&mut rng) as usize] += 1;
        }
        // Rank 1 has probability 1 / H(1000, 1.1) ≈ 0.179.
        assert!((17_000..19_000).contains(&count[0]), "{}", count[0]);
        assert!(count[0] > count[1] && count[1] > count[9] && count[9] > count[99]);
        let uniform = Zipf::new(10, 0.0);
        let mut seen = [false; 10];
        for _ in 0..1000 {
            seen[uniform.draw(&mut rng) as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
    }

    #[test]
    fn plans_are_deterministic_and_keep_rows_to_their_worker() {
        let task = Task::Mf(Mf { rows: 64, cols: 16, col_zipf: 1.1, cells: 8 });
        let a = Plan::new(&task, 4, 20, 7);
        let b = Plan::new(&task, 4, 20, 7);
        assert_eq!(a.batches, b.batches);
        let rows_of = |w: usize| -> HashSet<Key> {
            a.batches[w].iter().flatten().copied().filter(|k| k.0 < 64).collect()
        };
        for w in 0..4 {
            for v in w + 1..4 {
                assert!(rows_of(w).is_disjoint(&rows_of(v)), "workers {w} and {v} share a row");
            }
        }
        for batch in a.batches.iter().flatten() {
            let distinct: HashSet<&Key> = batch.iter().collect();
            assert_eq!(distinct.len(), batch.len());
            assert!(batch.iter().all(|k| k.0 < 80));
        }
    }
}

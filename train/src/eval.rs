//! Filtered link prediction (Bordes et al. 2013, the protocol of ConvE and LibKGE): for each
//! triple `(h, r, t)` of the split, rank the true tail among all entities for `(h, r, ?)` and
//! the true head among all entities for `(?, r, t)`, leaving out every other entity that
//! makes a triple known in train, valid or test. A tie counts half (the mean of the optimistic
//! and the pessimistic rank). MRR and Hits@k are means over both directions.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::kg::{Kg, Triple};
use super::kge::{dot, Model, Side};

/// Ranking quality on one split.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Ranking {
    /// Mean reciprocal rank.
    pub mrr: f64,
    /// Share of ranks ≤ 1.
    pub hits1: f64,
    /// Share of ranks ≤ 3.
    pub hits3: f64,
    /// Share of ranks ≤ 10.
    pub hits10: f64,
    /// Mean rank.
    pub mr: f64,
}

/// The true answers of every `(h, r, ?)` and `(?, r, t)` query, from all splits.
pub struct Filter {
    tails: HashMap<(u32, u32), HashSet<u32>>,
    heads: HashMap<(u32, u32), HashSet<u32>>,
}

impl Filter {
    /// The filter of `kg`'s three splits.
    pub fn new(kg: &Kg) -> Filter {
        let (mut tails, mut heads) = (HashMap::new(), HashMap::new());
        for t in kg.train.iter().chain(&kg.valid).chain(&kg.test) {
            tails.entry((t.head, t.rel)).or_insert_with(HashSet::new).insert(t.tail);
            heads.entry((t.rel, t.tail)).or_insert_with(HashSet::new).insert(t.head);
        }
        Filter { tails, heads }
    }
}

/// Sums over ranked queries, which add up across parts of a split; [`RankSums::ranking`]
/// makes them means.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RankSums {
    /// Σ 1/rank.
    pub rr: f64,
    /// Σ rank.
    pub rank: f64,
    /// Ranks ≤ 1, ≤ 3, ≤ 10.
    pub hits: [u64; 3],
    /// Queries ranked (two per triple).
    pub queries: u64,
}

impl RankSums {
    fn add_rank(&mut self, rank: f64) {
        self.rr += 1.0 / rank;
        self.rank += rank;
        for (h, k) in self.hits.iter_mut().zip([1.0, 3.0, 10.0]) {
            *h += u64::from(rank <= k);
        }
        self.queries += 1;
    }

    /// The means (all zero for no query).
    pub fn ranking(&self) -> Ranking {
        if self.queries == 0 {
            return Ranking::default();
        }
        let n = self.queries as f64;
        Ranking {
            mrr: self.rr / n,
            hits1: self.hits[0] as f64 / n,
            hits3: self.hits[1] as f64 / n,
            hits10: self.hits[2] as f64 / n,
            mr: self.rank / n,
        }
    }
}

/// Both sums together.
impl std::ops::Add for RankSums {
    type Output = RankSums;

    fn add(self, o: RankSums) -> RankSums {
        let mut hits = self.hits;
        for (h, x) in hits.iter_mut().zip(o.hits) {
            *h += x;
        }
        RankSums { rr: self.rr + o.rr, rank: self.rank + o.rank, hits, queries: self.queries + o.queries }
    }
}

/// Ranks `triples` with the embeddings `emb(key)` (entity `e` is key `e`, relation `r` key
/// `entities + r`), filtered by `filter`.
pub fn rank<'a>(
    model: Model,
    entities: u32,
    triples: &[Triple],
    filter: &Filter,
    emb: impl Fn(u64) -> &'a [f32],
) -> Ranking {
    rank_sums(model, entities, triples, filter, emb).ranking()
}

/// The sums of [`rank`] over `triples`, to add to those of other parts of the split.
pub fn rank_sums<'a>(
    model: Model,
    entities: u32,
    triples: &[Triple],
    filter: &Filter,
    emb: impl Fn(u64) -> &'a [f32],
) -> RankSums {
    let mut out = RankSums::default();
    let empty = HashSet::new();
    let mut q = Vec::new();
    for t in triples {
        let (h, r, tl) =
            (emb(t.head.into()), emb(u64::from(entities) + u64::from(t.rel)), emb(t.tail.into()));
        q.resize(h.len(), 0.0);
        // Tail prediction, then head prediction: each candidate's score is its dot product with
        // the query's vector (see `Model::query`), the true answer's too, so that ties are exact.
        for (side, answer, known) in [
            (Side::Tail, t.tail, filter.tails.get(&(t.head, t.rel))),
            (Side::Head, t.head, filter.heads.get(&(t.rel, t.tail))),
        ] {
            model.query(side, h, r, tl, &mut q);
            let known = known.unwrap_or(&empty);
            let truth = dot(&q, emb(answer.into()));
            let (mut greater, mut equal) = (0u32, 0u32);
            for e in 0..entities {
                if e == answer || known.contains(&e) {
                    continue;
                }
                let s = dot(&q, emb(e.into()));
                greater += u32::from(s > truth);
                equal += u32::from(s == truth);
            }
            out.add_rank(1.0 + f64::from(greater) + f64::from(equal) / 2.0);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filtered_ranks_skip_other_true_answers() {
        // DistMult, dim 1: entity e has embedding e+1, the relation 1. Scores grow with the
        // entities, so for (0, r, ?) the true tail 1 is beaten by 2 and 3; 3 is a known answer
        // (train), so the filtered rank is 2. For (?, r, 1): heads 1, 2, 3 beat 0, and 2 is
        // known (valid): rank 3.
        let t = |h, tl| Triple { head: h, rel: 0, tail: tl };
        let kg = Kg::from_triples(4, 1, vec![t(0, 3)], vec![t(2, 1)], vec![t(0, 1)]);
        let table: Vec<[f32; 1]> = vec![[1.0], [2.0], [3.0], [4.0], [1.0]];
        let r = rank(Model::DistMult, 4, &kg.test, &Filter::new(&kg), |k| &table[k as usize][..]);
        assert!((r.mrr - (0.5 + 1.0 / 3.0) / 2.0).abs() < 1e-12, "{r:?}");
        assert_eq!((r.hits1, r.hits3, r.hits10, r.mr), (0.0, 1.0, 1.0, 2.5));
    }

    #[test]
    fn ties_count_half() {
        let t = Triple { head: 0, rel: 0, tail: 1 };
        let kg = Kg::from_triples(3, 1, vec![], vec![], vec![t]);
        let zeros = [0.0f32; 2];
        let r = rank(Model::ComplEx, 3, &kg.test, &Filter::new(&kg), |_| &zeros[..]);
        // Every score is 0: the two other entities tie in each direction, rank 1 + 2/2 = 2.
        assert!((r.mrr - 0.5).abs() < 1e-12 && r.hits1 == 0.0 && r.hits3 == 1.0, "{r:?}");
    }

    #[test]
    fn sums_of_parts_are_the_sums_of_the_whole() {
        let t = |h, tl| Triple { head: h, rel: 0, tail: tl };
        let test: Vec<Triple> = (0..7).map(|i| t(i % 4, (i * 3 + 1) % 4)).collect();
        let kg = Kg::from_triples(4, 1, vec![t(0, 3)], vec![], test);
        let table: Vec<[f32; 2]> = (0..5).map(|k| [k as f32 * 0.3 - 0.4, 1.0 - k as f32 * 0.2]).collect();
        let f = Filter::new(&kg);
        let emb = |k: u64| &table[k as usize][..];
        let whole = rank_sums(Model::ComplEx, 4, &kg.test, &f, emb);
        let parts = [0..2, 2..3, 3..7]
            .map(|r| rank_sums(Model::ComplEx, 4, &kg.test[r], &f, emb))
            .into_iter()
            .fold(RankSums::default(), |a, b| a + b);
        assert_eq!(whole.queries, 14);
        assert_eq!((parts.hits, parts.queries), (whole.hits, whole.queries));
        assert!((parts.rr - whole.rr).abs() < 1e-12 && (parts.rank - whole.rank).abs() < 1e-9);
        assert_eq!(rank_sums(Model::ComplEx, 4, &[], &f, emb).ranking(), Ranking::default());
    }
}

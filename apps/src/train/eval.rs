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

/// Ranks `triples` with the embeddings `emb(key)` (entity `e` is key `e`, relation `r` key
/// `entities + r`), filtered by `filter`.
pub fn rank<'a>(
    model: Model,
    entities: u32,
    triples: &[Triple],
    filter: &Filter,
    emb: impl Fn(u64) -> &'a [f32],
) -> Ranking {
    if triples.is_empty() {
        return Ranking::default();
    }
    let mut out = Ranking::default();
    let mut add = |greater: u32, equal: u32| {
        let rank = 1.0 + f64::from(greater) + f64::from(equal) / 2.0;
        out.mrr += 1.0 / rank;
        out.mr += rank;
        out.hits1 += f64::from(u8::from(rank <= 1.0));
        out.hits3 += f64::from(u8::from(rank <= 3.0));
        out.hits10 += f64::from(u8::from(rank <= 10.0));
    };
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
            let (mut greater, mut equal) = (0, 0);
            for e in 0..entities {
                if e == answer || known.contains(&e) {
                    continue;
                }
                let s = dot(&q, emb(e.into()));
                greater += u32::from(s > truth);
                equal += u32::from(s == truth);
            }
            add(greater, equal);
        }
    }
    let n = 2.0 * triples.len() as f64;
    out.mrr /= n;
    out.mr /= n;
    out.hits1 /= n;
    out.hits3 /= n;
    out.hits10 /= n;
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
}

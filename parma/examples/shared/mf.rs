//! The matrix-factorization loop both examples run (`docs/guide.md`): generated ratings, one
//! SGD step per batch, each batch's keys announced ahead with a `Prefetch`.
#![allow(dead_code)]

use parma::{Key, Prefetch, Worker};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub const USERS: u64 = 300;
pub const ITEMS: u64 = 400;
pub const RANK: usize = 8;
pub const RATINGS: usize = 40_000;
pub const BATCH: usize = 32;
pub const LR: f32 = 0.05;
pub const REG: f32 = 0.01;

/// A rating: user, item, value.
pub type Rating = (u64, u64, f32);

/// Ratings of a planted rank-3 model plus noise; the last tenth is the test set.
pub fn ratings() -> (Vec<Rating>, Vec<Rating>) {
    let mut rng = StdRng::seed_from_u64(7);
    let mut factor = |n: u64| -> Vec<[f32; 3]> {
        (0..n)
            .map(|_| [rng.gen_range(-1.0..1.0), rng.gen_range(-1.0..1.0), rng.gen_range(-1.0..1.0)])
            .collect()
    };
    let (u, i) = (factor(USERS), factor(ITEMS));
    let mut rng = StdRng::seed_from_u64(8);
    let mut all: Vec<Rating> = (0..RATINGS)
        .map(|_| {
            let (a, b) = (rng.gen_range(0..USERS), rng.gen_range(0..ITEMS));
            let dot: f32 = (0..3).map(|k| u[a as usize][k] * i[b as usize][k]).sum();
            (a, b, dot + rng.gen_range(-0.1..0.1))
        })
        .collect();
    let test = all.split_off(RATINGS - RATINGS / 10);
    (all, test)
}

/// A user's key, and an item's: users first, then items.
pub fn keys_of(&(u, i, _): &Rating) -> [Key; 2] {
    [Key(u), Key(USERS + i)]
}

/// One epoch of SGD over `mine`, a step per batch, the keys of each batch announced
/// `lookahead` steps ahead.
pub fn epoch(w: &mut Worker, mine: &[Rating], lookahead: usize) -> Result<(), parma::Error> {
    // A batch's keys, each once (a call refuses a key twice), users and items in order.
    let batches = mine.chunks(BATCH).map(|b| {
        let mut keys: Vec<Key> = b.iter().flat_map(keys_of).collect();
        keys.sort_unstable();
        keys.dedup();
        (keys, b)
    });
    let mut source = batches.map(|(keys, b)| Step { keys, ratings: b });
    let mut steps = Prefetch::new(lookahead)?;
    let (mut vals, mut grad) = (Vec::new(), Vec::new());
    while let Some(step) = steps.next_step(w, &mut source)? {
        vals.resize(step.keys.len() * RANK, 0.0);
        w.pull(&step.keys, &mut vals)?;
        grad.clear();
        grad.resize(vals.len(), 0.0);
        let row = |k: Key| step.keys.binary_search(&k).expect("a batch's key") * RANK;
        for r in step.ratings {
            let [ku, ki] = keys_of(r);
            let (pu, pi) = (row(ku), row(ki));
            let err = (0..RANK).map(|d| vals[pu + d] * vals[pi + d]).sum::<f32>() - r.2;
            for d in 0..RANK {
                grad[pu + d] -= LR * (err * vals[pi + d] + REG * vals[pu + d]);
                grad[pi + d] -= LR * (err * vals[pu + d] + REG * vals[pi + d]);
            }
        }
        // A push adds: the update is the negative gradient step.
        let t = w.push(&step.keys, &grad)?;
        w.wait(t)?;
    }
    Ok(())
}

/// A step of the loop: its keys (what `Prefetch` announces) and its ratings.
pub struct Step<'a> {
    pub keys: Vec<Key>,
    pub ratings: &'a [Rating],
}

impl AsRef<[Key]> for Step<'_> {
    fn as_ref(&self) -> &[Key] {
        &self.keys
    }
}

/// Test RMSE of the model as `w` reads it.
pub fn rmse(w: &mut Worker, test: &[Rating]) -> Result<f64, parma::Error> {
    let mut vals = [0.0f32; 2 * RANK];
    let mut sq = 0.0f64;
    for r in test {
        w.pull(&keys_of(r), &mut vals)?;
        let p: f32 = (0..RANK).map(|d| vals[d] * vals[RANK + d]).sum();
        sq += f64::from(p - r.2).powi(2);
    }
    Ok((sq / test.len() as f64).sqrt())
}

//! The step of [`super::StepModel`] for a softmax loss or negatives shared by a step (every mode
//! but the logistic loss with negatives of each triple's own, which `StepModel::step_bce` keeps
//! as AdaPM's app computes it).
//!
//! Each side of a triple is a query: `(h, r, ?)` asks for the tail, `(?, r, t)` for the head.
//! Both models score a candidate `e` of a query as a dot product with a query vector built from
//! the two known embeddings: ComplEx's `Re(Σ h r conj(t))` is `<q, t>` with `q = h ∘ r`
//! (complex product) and `<u, h>` with `u = (Re(r conj t), -Im(r conj t))`; DistMult's
//! `Σ h r t` is `<h ∘ r, t>` and `<r ∘ t, h>`. So a query costs one product of two embeddings
//! and each of its candidates one dot product and two scaled additions, instead of a full
//! three-way score and its three gradients per candidate.
//!
//! Loss of one query with the true answer `a` and candidates `e_1..e_n`:
//! - softmax: `-s(a) + log(exp s(a) + Σ exp s(e_i))`, the cross-entropy of 1vsAll training
//!   (LibKGE, Lacroix et al. 2018) over the sampled candidates; a candidate that is the true
//!   answer itself is left out;
//! - logistic: `Σ softplus(s(e_i))`, plus `softplus(-s(a))` once per triple (on its tail query).
//!
//! The regularizer's gradient is added once per triple for each of its three embeddings (the
//! per-triple weighting of Lacroix et al.'s N3), not for each score; with `--reg-on all`, also
//! once for each candidate of each query.

use super::{sigmoid, softplus, Loss, Model, RegOn, StepModel};
use crate::kg::Triple;
use crate::task::StepBuffers;

/// Which side of a triple a query asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Tail,
    Head,
}

/// `<a, b>`, with eight partial sums so that the compiler can keep them in vector registers
/// (a single running sum of floats cannot be reordered).
#[inline]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `y += c * x`.
#[inline]
fn axpy(c: f32, x: &[f32], y: &mut [f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += c * x;
    }
}

impl Model {
    /// The query vector of `side` from the triple's embeddings (the asked-for one is unused):
    /// the score of a candidate `e` for that side is `dot(q, e)`.
    pub(crate) fn query(self, side: Side, h: &[f32], r: &[f32], t: &[f32], q: &mut [f32]) {
        match (self, side) {
            (Model::DistMult, Side::Tail) => {
                q.iter_mut().zip(h.iter().zip(r)).for_each(|(q, (a, b))| *q = a * b)
            }
            (Model::DistMult, Side::Head) => {
                q.iter_mut().zip(r.iter().zip(t)).for_each(|(q, (a, b))| *q = a * b)
            }
            (Model::ComplEx, Side::Tail) => {
                let d = h.len() / 2;
                for k in 0..d {
                    let (hr, hi, rr, ri) = (h[k], h[d + k], r[k], r[d + k]);
                    q[k] = hr * rr - hi * ri;
                    q[d + k] = hr * ri + hi * rr;
                }
            }
            (Model::ComplEx, Side::Head) => {
                let d = h.len() / 2;
                for k in 0..d {
                    let (rr, ri, tr, ti) = (r[k], r[d + k], t[k], t[d + k]);
                    q[k] = rr * tr + ri * ti;
                    q[d + k] = rr * ti - ri * tr;
                }
            }
        }
    }

    /// Adds the gradient `gq` of the query vector of `side` to the gradients of the two
    /// embeddings it was built from: `(h, r)` for a tail query into `(ga, gb)`, `(r, t)` for a
    /// head query.
    #[allow(clippy::too_many_arguments)]
    fn query_backprop(
        self,
        side: Side,
        h: &[f32],
        r: &[f32],
        t: &[f32],
        gq: &[f32],
        ga: &mut [f32],
        gb: &mut [f32],
    ) {
        match (self, side) {
            (Model::DistMult, Side::Tail) => {
                for k in 0..gq.len() {
                    ga[k] += gq[k] * r[k];
                    gb[k] += gq[k] * h[k];
                }
            }
            (Model::DistMult, Side::Head) => {
                for k in 0..gq.len() {
                    ga[k] += gq[k] * t[k];
                    gb[k] += gq[k] * r[k];
                }
            }
            (Model::ComplEx, Side::Tail) => {
                let d = h.len() / 2;
                for k in 0..d {
                    let (hr, hi, rr, ri, gr, gi) = (h[k], h[d + k], r[k], r[d + k], gq[k], gq[d + k]);
                    ga[k] += gr * rr + gi * ri;
                    ga[d + k] += gi * rr - gr * ri;
                    gb[k] += gr * hr + gi * hi;
                    gb[d + k] += gi * hr - gr * hi;
                }
            }
            (Model::ComplEx, Side::Head) => {
                let d = h.len() / 2;
                for k in 0..d {
                    let (rr, ri, tr, ti, gr, gi) = (r[k], r[d + k], t[k], t[d + k], gq[k], gq[d + k]);
                    ga[k] += gr * tr + gi * ti;
                    ga[d + k] += gr * ti - gi * tr;
                    gb[k] += gr * rr - gi * ri;
                    gb[d + k] += gr * ri + gi * rr;
                }
            }
        }
    }
}

/// A query's loss and its coefficients `d loss / d score`: of the true answer (`s_pos`) and of
/// each candidate (`scores`, overwritten with theirs; a candidate with `skip` set gets 0).
fn coefficients(loss: Loss, positive: bool, s_pos: f32, scores: &mut [f32], skip: &[bool]) -> (f64, f32) {
    match loss {
        Loss::Softmax => {
            let max = scores.iter().zip(skip).filter(|(_, s)| !**s).map(|(x, _)| *x).fold(s_pos, f32::max);
            let mut sum = (s_pos - max).exp();
            for (x, s) in scores.iter_mut().zip(skip) {
                *x = if *s { 0.0 } else { (*x - max).exp() };
                sum += *x;
            }
            for x in scores.iter_mut() {
                *x /= sum;
            }
            let lse = max + sum.ln();
            (f64::from(lse - s_pos), (s_pos - lse).exp() - 1.0)
        }
        Loss::Bce => {
            let mut l = 0.0f64;
            for x in scores.iter_mut() {
                l += f64::from(softplus(*x));
                *x = sigmoid(*x);
            }
            if positive {
                (l + f64::from(softplus(-s_pos)), -sigmoid(-s_pos))
            } else {
                (l, 0.0)
            }
        }
    }
}

impl StepModel {
    /// The step on `triples` through queries (see the module docs). `neg_rows` are the rows of
    /// the step's negatives: shared by every query, or `2 * negatives` per triple (heads, then
    /// tails). Returns the summed loss (without the regularizer).
    pub(super) fn step_queries(&self, triples: &[Triple], b: &mut StepBuffers, neg_rows: &[usize]) -> f64 {
        let (d, len) = (self.dim, self.value_len());
        let n = self.negatives;
        let (mut q, mut gq) = (vec![0.0f32; d], vec![0.0f32; d]);
        let (mut ga, mut gb) = (vec![0.0f32; d], vec![0.0f32; d]);
        let mut coef: Vec<f32> = Vec::new();
        let mut skip: Vec<bool> = Vec::new();
        let mut loss = 0.0f64;
        for (j, t) in triples.iter().enumerate() {
            let rh = b.rows[&u64::from(t.head)];
            let rr = b.rows[&self.rel_key(t.rel).0];
            let rt = b.rows[&u64::from(t.tail)];
            let emb = |row: usize| row * len..row * len + d;
            for side in [Side::Tail, Side::Head] {
                let cands = if self.shared {
                    neg_rows
                } else {
                    let at = j * 2 * n + if side == Side::Head { 0 } else { n };
                    &neg_rows[at..at + n]
                };
                let rows = &b.row_vals;
                let (hv, rv, tv) = (&rows[emb(rh)], &rows[emb(rr)], &rows[emb(rt)]);
                self.model.query(side, hv, rv, tv, &mut q);
                let answer = if side == Side::Tail { rt } else { rh };
                let s_pos = dot(&q, &rows[emb(answer)]);
                coef.clear();
                coef.extend(cands.iter().map(|&c| dot(&q, &rows[emb(c)])));
                skip.clear();
                skip.extend(cands.iter().map(|&c| self.loss == Loss::Softmax && c == answer));
                let (l, c_pos) = coefficients(self.loss, side == Side::Tail, s_pos, &mut coef, &skip);
                loss += l;
                // Gradients: of the query vector, and of each candidate (and the answer), which
                // enter the score as `<q, e>`.
                gq.fill(0.0);
                axpy(c_pos, &rows[emb(answer)], &mut gq);
                axpy(c_pos, &q, &mut b.grads[answer * d..(answer + 1) * d]);
                for (&c, &k) in coef.iter().zip(cands) {
                    if c != 0.0 {
                        axpy(c, &rows[emb(k)], &mut gq);
                        axpy(c, &q, &mut b.grads[k * d..(k + 1) * d]);
                    }
                }
                ga.fill(0.0);
                gb.fill(0.0);
                self.model.query_backprop(side, hv, rv, tv, &gq, &mut ga, &mut gb);
                let (a, bb) = if side == Side::Tail { (rh, rr) } else { (rr, rt) };
                axpy(1.0, &ga, &mut b.grads[a * d..(a + 1) * d]);
                axpy(1.0, &gb, &mut b.grads[bb * d..(bb + 1) * d]);
                if self.reg_on == RegOn::All && self.reg.weight() > 0.0 {
                    for &k in cands {
                        ga.fill(0.0);
                        self.reg.add_grad(self.model, &b.row_vals[emb(k)], &mut ga);
                        axpy(1.0, &ga, &mut b.grads[k * d..(k + 1) * d]);
                    }
                }
            }
            if self.reg.weight() > 0.0 {
                for row in [rh, rr, rt] {
                    ga.fill(0.0);
                    self.reg.add_grad(self.model, &b.row_vals[emb(row)], &mut ga);
                    axpy(1.0, &ga, &mut b.grads[row * d..(row + 1) * d]);
                }
            }
        }
        loss
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The query vectors score as the model does, and their gradients match the model's.
    #[test]
    fn queries_score_and_differentiate_as_the_model() {
        let h = [0.3f32, -0.2, 0.5, 0.1, 0.7, -0.6, 0.05, 0.2, -0.3, 0.4];
        let r = [0.7f32, 0.4, -0.3, 0.2, -0.1, 0.9, 0.3, -0.5, 0.6, 0.1];
        let t = [-0.1f32, 0.6, 0.2, -0.4, 0.3, 0.8, -0.7, 0.1, 0.2, -0.2];
        for m in Model::ALL {
            let s = m.score(&h, &r, &t);
            let (mut gh, mut gr, mut gt) = ([0.0; 10], [0.0; 10], [0.0; 10]);
            m.add_grad(1.0, &h, &r, &t, &mut gh, &mut gr, &mut gt);
            let mut q = [0.0; 10];
            for side in [Side::Tail, Side::Head] {
                m.query(side, &h, &r, &t, &mut q);
                let (other, g_other) = if side == Side::Tail { (&t, &gt) } else { (&h, &gh) };
                assert!((dot(&q, other) - s).abs() < 1e-5, "{m:?}: score");
                for k in 0..10 {
                    assert!((q[k] - g_other[k]).abs() < 1e-5, "{m:?}: the query is the gradient");
                }
                // d s / d q is the candidate; back through the query to the two others.
                let (mut ga, mut gb) = ([0.0; 10], [0.0; 10]);
                m.query_backprop(side, &h, &r, &t, other, &mut ga, &mut gb);
                let (wa, wb) = if side == Side::Tail { (&gh, &gr) } else { (&gr, &gt) };
                for k in 0..10 {
                    assert!((ga[k] - wa[k]).abs() < 1e-5 && (gb[k] - wb[k]).abs() < 1e-5, "{m:?} {k}");
                }
            }
        }
    }

    #[test]
    fn softmax_coefficients_sum_to_zero_and_skip_the_answer() {
        let mut scores = [1.0f32, -0.5, 2.0];
        let (l, c_pos) = coefficients(Loss::Softmax, true, 0.5, &mut scores, &[false, false, true]);
        let z = 0.5f32.exp() + 1.0f32.exp() + (-0.5f32).exp();
        assert!((l - f64::from(z.ln() - 0.5)).abs() < 1e-6, "{l}");
        assert_eq!(scores[2], 0.0);
        assert!((c_pos + scores.iter().sum::<f32>()).abs() < 1e-6);
        assert!((dot(&[1.0; 11], &[2.0; 11]) - 22.0).abs() < 1e-6);
    }
}

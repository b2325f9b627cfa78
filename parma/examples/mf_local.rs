//! Matrix factorization on generated ratings, on an in-process cluster under adaptive
//! management: the loop `docs/guide.md` walks through.
//!
//! `cargo run --release -p parma --example mf_local` (optional arguments: nodes, workers per
//! node, epochs). It prints the test RMSE after each epoch beside the RMSE of predicting the
//! mean rating, writes a checkpoint, restores it, and exits non-zero if the model did not
//! learn.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use parma::{Config, Init, Layout, LocalCluster, Technique};

#[path = "shared/mf.rs"]
mod mf;
use mf::{epoch, ratings, rmse, Rating, BATCH, ITEMS, RANK, USERS};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = |i: usize, default: u16| std::env::args().nth(i).map_or(Ok(default), |a| a.parse());
    let (nodes, workers, epochs) = (arg(1, 2)?, arg(2, 2)?, arg(3, 8)?);
    let (train, test) = ratings();
    let mean = train.iter().map(|r| f64::from(r.2)).sum::<f64>() / train.len() as f64;
    let mean_rmse =
        (test.iter().map(|r| (f64::from(r.2) - mean).powi(2)).sum::<f64>() / test.len() as f64).sqrt();

    let mut cfg = Config::new(nodes, workers, Layout::uniform(USERS + ITEMS, RANK as u32)?);
    cfg.technique = Technique::Adaptive;
    cfg.init = Init::Uniform { scale: 0.3 };
    let threads = usize::from(nodes) * usize::from(workers);
    let lookahead = parma::default_lookahead(BATCH);
    let dir = std::env::temp_dir().join(format!("parma-mf-local-{}", std::process::id()));

    let mut cluster = LocalCluster::start(cfg)?;
    let finals = cluster.run(|w| {
        let me = usize::from(w.node().0) * usize::from(workers) + usize::from(w.id().0);
        // Every worker trains on its own slice of the ratings.
        let mine: Vec<Rating> = train.iter().copied().skip(me).step_by(threads).collect();
        let mut last = f64::NAN;
        for e in 1..=epochs {
            epoch(w, &mine, lookahead)?;
            w.barrier()?; // every worker's updates of the epoch are in
            if me == 0 {
                last = rmse(w, &test)?;
                println!("epoch {e}: test RMSE {last:.4} (the mean rating's: {mean_rmse:.4})");
            }
            w.barrier()?;
        }
        // A consistent snapshot of the whole model, then the same model restored from it.
        let extra = BTreeMap::from([("example".to_string(), "mf_local".to_string())]);
        w.checkpoint(&dir, &extra)?;
        w.restore(&dir)?;
        if me == 0 {
            let restored = rmse(w, &test)?;
            println!("restored from {}: test RMSE {restored:.4}", dir.display());
            if (restored - last).abs() > 1e-6 {
                return Err(parma::Error::Options(format!("restored RMSE {restored} differs from {last}")));
            }
        }
        Ok::<_, parma::Error>(last)
    })?;
    let stats = cluster.shutdown()?;
    let _ = std::fs::remove_dir_all(&dir);
    let (local, remote) = stats.iter().fold((0, 0), |(l, r), s| {
        let t = s.workers_total();
        (l + t.keys_pulled_local, r + t.keys_pulled_remote)
    });
    println!("pulls: {local} keys local, {remote} remote");
    let final_rmse = finals[0];
    if final_rmse.is_nan() || final_rmse >= 0.8 * mean_rmse {
        return Err(format!(
            "the model did not learn: RMSE {final_rmse:.4} against the mean's {mean_rmse:.4}"
        )
        .into());
    }
    Ok(())
}

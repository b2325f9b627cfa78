//! The loop of `mf_local`, one node per process: start this program once per node with any
//! launcher parma reads (`docs/deploy.md`: torchrun, Slurm, MPI, ps-lite's variables, or
//! parma's own `PARMA_RANK`, `PARMA_WORLD_SIZE`, `PARMA_RENDEZVOUS`), and the cluster token in
//! `PARMA_TOKEN` or `PARMA_TOKEN_FILE`. On one machine:
//!
//! ```sh
//! cargo build --release -p parma --example mf_cluster
//! export PARMA_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n') PARMA_WORLD_SIZE=2 \
//!     PARMA_RENDEZVOUS=127.0.0.1:29500
//! PARMA_RANK=0 target/release/examples/mf_cluster & PARMA_RANK=1 target/release/examples/mf_cluster
//! ```
//!
//! Optional arguments: workers per node, epochs. Rank 0 prints the test RMSE after each epoch;
//! every process exits non-zero if the model did not learn.
#![forbid(unsafe_code)]

use parma::node::{self, NodeOptions};
use parma::{Config, Init, Layout, Options, Technique};

#[path = "shared/mf.rs"]
mod mf;
use mf::{epoch, ratings, rmse, Rating, BATCH, ITEMS, RANK, USERS};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = |i: usize, default: u16| std::env::args().nth(i).map_or(Ok(default), |a| a.parse());
    let (workers, epochs) = (arg(1, 1)?, arg(2, 6)?);
    let world: u16 = std::env::var("PARMA_WORLD_SIZE").map_or(Ok(1), |w| w.parse())?;
    let (train, test) = ratings();
    let mean = train.iter().map(|r| f64::from(r.2)).sum::<f64>() / train.len() as f64;
    let mean_rmse =
        (test.iter().map(|r| (f64::from(r.2) - mean).powi(2)).sum::<f64>() / test.len() as f64).sqrt();

    // Every node builds the same configuration; the rendezvous refuses a node that does not.
    let mut cfg = Config::new(world, workers, Layout::uniform(USERS + ITEMS, RANK as u32)?);
    cfg.technique = Technique::Adaptive;
    cfg.init = Init::Uniform { scale: 0.3 };
    let Some(node) = node::start(cfg, &NodeOptions::default(), Options::default())? else {
        return Ok(()); // not a node (ps-lite's scheduler)
    };
    let threads = usize::from(world) * usize::from(workers);
    let lookahead = parma::default_lookahead(BATCH);
    let me_node = node.me;

    let results: Vec<Result<f64, parma::Error>> = std::thread::scope(|s| {
        let handles: Vec<_> = node
            .workers
            .into_iter()
            .map(|mut w| {
                let (train, test, runtime) = (&train, &test, &node.runtime);
                s.spawn(move || {
                    let mut run = || -> Result<f64, parma::Error> {
                        let me = usize::from(w.node().0) * usize::from(workers) + usize::from(w.id().0);
                        let mine: Vec<Rating> = train.iter().copied().skip(me).step_by(threads).collect();
                        for e in 1..=epochs {
                            epoch(&mut w, &mine, lookahead)?;
                            w.barrier()?;
                            if me == 0 {
                                let now = rmse(&mut w, test)?;
                                println!("epoch {e}: test RMSE {now:.4} (the mean rating's: {mean_rmse:.4})");
                            }
                            w.barrier()?;
                        }
                        // Every node learns the final figure from its own reads.
                        rmse(&mut w, test)
                    };
                    let r = run();
                    if r.is_err() {
                        runtime.abort(); // the node's other workers stop waiting
                        return r;
                    }
                    w.finalize()?;
                    r
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a worker thread panicked")).collect()
    });
    let finals = results.into_iter().collect::<Result<Vec<f64>, _>>()?;
    node.runtime.shutdown()?;
    println!("node {}: test RMSE {:.4}", me_node.0, finals[0]);
    if finals[0].is_nan() || finals[0] >= 0.8 * mean_rmse {
        return Err(format!(
            "the model did not learn: RMSE {:.4} against the mean's {mean_rmse:.4}",
            finals[0]
        )
        .into());
    }
    Ok(())
}

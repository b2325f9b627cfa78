//! Runs simulation seeds under every technique (or one) and prints what each did.
//!
//! `cargo run --release -p parma-conformance --example sim_one -- [first seed] [count] [technique]`
#![forbid(unsafe_code)]

use parma_core::Technique;

fn main() {
    let mut args = std::env::args().skip(1);
    let first: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let count: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let techniques: Vec<Technique> = match args.next() {
        Some(name) => vec![Technique::from_name(&name).expect("unknown technique")],
        None => Technique::ALL.to_vec(),
    };
    for t in techniques {
        let (mut ok, mut failed) = (0, 0);
        for seed in first..first + count {
            match parma_conformance::sim::run_seed(seed, t) {
                Ok(r) if count == 1 => println!("{t:?} {r:?}"),
                Ok(_) => ok += 1,
                Err(f) => {
                    failed += 1;
                    println!("{f}");
                }
            }
        }
        if count > 1 {
            println!("{}: {ok} passed, {failed} failed", t.name());
        }
    }
}

fn main() {
    let seed: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1);
    for t in [parma_core::Technique::Relocation, parma_core::Technique::StaticPartitioning] {
        match parma_conformance::sim::run_seed(seed, t) {
            Ok(r) => println!("{t:?} {r:?}"),
            Err(f) => println!("{f}"),
        }
    }
}

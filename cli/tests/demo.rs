//! The demo on a tiny cluster, under every technique, on the same seed.
#![forbid(unsafe_code)]

use parma_cli::demo::{self, DemoOptions, DemoReport, DemoTransport};
use parma_core::Technique;

fn tiny(technique: Technique) -> DemoOptions {
    DemoOptions {
        nodes: 2,
        workers: 1,
        keys: 1000,
        len: 4,
        batches: 50,
        batch_keys: 16,
        zipf: 1.1,
        seed: 7,
        technique,
        ahead: demo::default_ahead(technique),
        transport: DemoTransport::Threaded,
    }
}

/// What holds for every run: every batch done, every drawn key pulled and pushed exactly once,
/// nothing dropped or failed.
fn check_common(r: &DemoReport) {
    let o = &r.options;
    let workers = u64::from(o.nodes) * u64::from(o.workers);
    assert_eq!(r.batches, workers * o.batches, "{r}");
    assert!(r.keys_drawn > r.batches && r.keys_drawn <= r.batches * o.batch_keys as u64, "{r}");
    assert_eq!(r.pulls.total(), r.keys_drawn, "{r}");
    assert_eq!(r.pushes.total(), r.keys_drawn, "{r}");
    // Replicas kept for the whole run check with their owners every round, until the end:
    // their last checks may meet a peer that has already stopped.
    if !matches!(o.technique, Technique::FullReplication | Technique::MultiTechnique) {
        assert_eq!(r.frames_dropped, 0, "{r}");
    }
    assert_eq!(r.ops_failed, 0, "{r}");
    if o.nodes > 1 {
        assert!(r.messages_sent > 0 && r.bytes_sent > 0, "{r}");
    }
}

#[test]
fn relocation_with_localize_ahead_beats_static() {
    let stat = demo::run(&tiny(Technique::StaticPartitioning)).unwrap();
    let reloc = demo::run(&tiny(Technique::Relocation)).unwrap();
    check_common(&stat);
    check_common(&reloc);

    // Same seed, same draws.
    assert_eq!(stat.keys_drawn, reloc.keys_drawn);
    // Static partitioning never moves a key, and with 2 nodes about half the keys are remote.
    assert_eq!(stat.relocations, 0, "{stat}");
    assert!(stat.pulls.remote > 0 && stat.pushes.remote > 0, "{stat}");
    // Relocation moves keys, and fewer accesses go remote.
    assert!(reloc.relocations > 0, "{reloc}");
    assert!(
        reloc.remote_share() < stat.remote_share(),
        "relocation {:.3} vs static {:.3}\n{reloc}\n{stat}",
        reloc.remote_share(),
        stat.remote_share()
    );
}

#[test]
fn every_technique_runs_and_adaptive_is_mostly_local() {
    let reports: Vec<DemoReport> = Technique::ALL.iter().map(|t| demo::run(&tiny(*t)).unwrap()).collect();
    for r in &reports {
        check_common(r);
    }
    let by = |t: Technique| reports.iter().find(|r| r.options.technique == t).unwrap();
    let (adaptive, stat) = (by(Technique::Adaptive), by(Technique::StaticPartitioning));
    assert_eq!(adaptive.keys_drawn, stat.keys_drawn);
    assert!(adaptive.remote_share() < stat.remote_share(), "{adaptive}\n{stat}");
    assert!(by(Technique::AdaptiveNoRelocation).relocations == 0);
    assert!(by(Technique::FullReplication).relocations == 0);
    assert!(by(Technique::AdaptiveNoReplication).replicas_created == 0);
    let table = demo::comparison(&reports);
    println!("{table}");
    for t in Technique::ALL {
        assert!(table.contains(&format!("| {} |", t.name())), "{table}");
    }
}

#[test]
fn one_node_is_all_local() {
    for technique in Technique::ALL {
        let r = demo::run(&DemoOptions { nodes: 1, workers: 2, ..tiny(technique) }).unwrap();
        check_common(&r);
        assert_eq!(r.accesses().remote, 0, "{r}");
        assert_eq!(r.relocations, 0, "{r}");
    }
}

#[test]
fn localize_each_batch_right_before_use() {
    let r = demo::run(&DemoOptions { ahead: 0, ..tiny(Technique::Relocation) }).unwrap();
    check_common(&r);
    assert!(r.relocations > 0, "{r}");
}

#[test]
fn the_demo_runs_over_zeromq_as_over_the_threaded_loopback() {
    for technique in [Technique::StaticPartitioning, Technique::Adaptive] {
        let threaded = demo::run(&tiny(technique)).unwrap();
        let zmq = demo::run(&DemoOptions { transport: DemoTransport::Zmq, ..tiny(technique) }).unwrap();
        check_common(&threaded);
        check_common(&zmq);
        assert_eq!(zmq.keys_drawn, threaded.keys_drawn, "same seed, same draws");
        assert_eq!(threaded.wire_bytes_sent, None, "{threaded}");
        let wire = zmq.wire_bytes_sent.expect("the ZeroMQ transport counts its bytes");
        assert!(wire > zmq.bytes_sent, "the wire carries every message and the session's packets\n{zmq}");
        if technique == Technique::StaticPartitioning {
            // Where a key is served depends on the key alone.
            assert_eq!((zmq.pulls, zmq.pushes), (threaded.pulls, threaded.pushes), "{zmq}\n{threaded}");
        }
    }
}

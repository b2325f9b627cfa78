//! Every conformance trace on the simulated network (several fault seeds) and on the threaded
//! in-process transport through the runtime. `PARMA_REWRITE=1` regenerates expected outputs.

use std::path::PathBuf;

use parma_conformance::trace::{run_trace, Executor, RuntimeExecutor, SimExecutor};
use parma_transport_loopback::threaded::{cluster, ThreadedOptions};

fn traces() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("traces");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("traces directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "trace"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "expected the conformance traces in {dir:?}");
    files
}

fn check_all(name: &str, make: &mut dyn FnMut(&parma_conformance::trace::Setup) -> Box<dyn Executor>) {
    let rewrite = std::env::var("PARMA_REWRITE").is_ok_and(|v| v == "1");
    let mut failed = Vec::new();
    for path in traces() {
        let text = std::fs::read_to_string(&path).expect("read trace");
        let (actual, matched) = run_trace(&text, make).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if rewrite && !matched {
            std::fs::write(&path, &actual).expect("rewrite trace");
        } else if !matched {
            failed.push(format!("--- {} on {name}: got\n{actual}", path.display()));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn traces_on_simulated_network() {
    for seed in 0..32 {
        check_all(&format!("sim seed {seed}"), &mut |s| Box::new(SimExecutor::new(s, seed)));
    }
}

#[test]
fn traces_on_threaded_transport() {
    for round in 0..3 {
        check_all(&format!("threaded, round {round}"), &mut |s| {
            Box::new(
                RuntimeExecutor::new(s, cluster(s.nodes, ThreadedOptions::default())).expect("start cluster"),
            )
        });
    }
}

#[test]
fn traces_on_threaded_transport_with_back_pressure() {
    // One frame per pair in flight: every send meets back-pressure.
    let opts = || ThreadedOptions { pair_frames_max: 1, ..ThreadedOptions::default() };
    check_all("threaded, 1 frame per pair", &mut |s| {
        Box::new(RuntimeExecutor::new(s, cluster(s.nodes, opts())).expect("start cluster"))
    });
}

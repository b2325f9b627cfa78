//! Training with one node per process (`parma node ... train ...`) over ZeroMQ on 127.0.0.1:
//! a run started by `parma launch` learns, a checkpoint written by two processes resumes on
//! three, a killed node fails the others within the peer timeout, and options such a run
//! cannot honour are refused before anything starts.
//!
//! Every wait is bounded; a test that runs out of time kills what it started and fails.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

mod common;

use common::{assert_refused_at_rendezvous, parma, spawn_nodes, test_mrr, text, wait_all, wait_up};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("parma-train-nodes-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn kge_learns_with_one_node_per_process_started_by_parma_launch() {
    let dir = scratch("metrics");
    std::fs::create_dir_all(&dir).unwrap();
    let metrics = dir.join("m.jsonl");
    let out = parma(&[
        "launch",
        "--nodes",
        "2",
        "--",
        "node",
        "train",
        "kge",
        "--data",
        "umls",
        "--workers",
        "1",
        "--epochs",
        "10",
        "--eval-every",
        "5",
        "--metrics",
        metrics.to_str().expect("utf-8 path"),
    ]);
    let all = text(&out);
    assert!(out.status.success(), "parma launch failed: {}\n{all}", out.status);
    for rank in 0..2 {
        assert!(
            all.contains(&format!("[{rank}] node {rank} of 2 (parma): up, training with 1 worker")),
            "rank {rank} did not start:\n{all}"
        );
    }
    assert!(all.contains("[1] node 1 of 2: trained its 1 workers' part of 10 epochs"), "{all}");
    // Without a terminal, node 0 still reports every epoch.
    for epoch in 1..=10 {
        assert!(all.contains(&format!("[0] epoch {epoch}: loss ")), "no line for epoch {epoch}:\n{all}");
    }
    // One process with two nodes reaches 0.90 to 0.92 after 10 epochs; the base rate of a
    // random model is below 0.05.
    let mrr = test_mrr(&all);
    assert!(mrr >= 0.85, "test MRR {mrr} after 10 epochs on two processes:\n{all}");
    // Node 0 evaluates and prints a line per pass; it alone writes the metrics, every epoch
    // once (node 1, given the same file, leaves it alone).
    assert_eq!(all.matches("[0] valid: MRR ").count(), 2, "{all}");
    assert_eq!(all.matches("[0] test: MRR ").count(), 1, "{all}");
    assert!(!all.contains("[1] valid:"), "{all}");
    let text = std::fs::read_to_string(&metrics).unwrap();
    let recs: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(
        recs.iter().map(|r| r["epoch"].as_u64().unwrap()).collect::<Vec<_>>(),
        (1..=10).collect::<Vec<_>>()
    );
    let valid: Vec<u64> =
        recs.iter().filter(|r| !r["valid"].is_null()).map(|r| r["epoch"].as_u64().unwrap()).collect();
    assert_eq!(valid, [5, 10], "{text}");
    assert!(recs[9]["test"]["mrr"].as_f64().is_some_and(|m| (m - mrr).abs() < 1e-3), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_checkpoint_written_by_two_processes_resumes_on_three() {
    let dir = scratch("resume");
    let d = dir.to_str().expect("utf-8 path");
    let first = parma(&[
        "launch",
        "--nodes",
        "2",
        "--",
        "node",
        "train",
        "kge",
        "--data",
        "umls",
        "--workers",
        "1",
        "--epochs",
        "4",
        "--eval-every",
        "0",
        "--checkpoint-every",
        "2",
        "--checkpoint-dir",
        d,
    ]);
    assert!(first.status.success(), "{}", text(&first));
    for f in ["manifest.json", "part-00000.bin", "part-00001.bin"] {
        assert!(dir.join(f).is_file(), "{f} missing from the checkpoint:\n{}", text(&first));
    }
    let resumed = parma(&[
        "launch",
        "--nodes",
        "3",
        "--",
        "node",
        "train",
        "kge",
        "--data",
        "umls",
        "--workers",
        "1",
        "--epochs",
        "8",
        "--eval-every",
        "0",
        "--resume",
        d,
    ]);
    let all = text(&resumed);
    assert!(resumed.status.success(), "{all}");
    assert!(all.contains("[2] node 2 of 3: trained its 1 workers' part of 8 epochs"), "{all}");
    let mrr = test_mrr(&all);
    assert!(mrr >= 0.85, "test MRR {mrr} after resuming epochs 5 to 8 on three processes:\n{all}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Three nodes, the last one killed: both survivors name it. The one that notices first stops
/// and says in its goodbye which peer it lost, so the other names the dead node even when that
/// goodbye reaches it before its own timeout fires, not the node that left because of it
/// (`transport-zmq/tests/bye_names_the_loss.rs` forces that order).
#[test]
fn a_killed_training_node_fails_the_others_within_the_peer_timeout_naming_it() {
    let peer_timeout = Duration::from_millis(1000);
    let args = [
        "--peer-timeout-ms",
        "1000",
        "train",
        "kge",
        "--data",
        "umls",
        "--workers",
        "1",
        "--epochs",
        "100000",
        "--eval-every",
        "0",
    ];
    let (mut nodes, rx) = spawn_nodes(3, &args);
    let mut lines = Vec::new();
    wait_up(&mut nodes, "up, training with 1 worker", &rx, &mut lines);
    thread::sleep(Duration::from_millis(500));
    let killed_at = Instant::now();
    nodes[2].child.kill().expect("SIGKILL node 2");
    let status = wait_all(&mut nodes, &rx, &mut lines);
    // Detection within the peer timeout plus a second; the rest is the processes' exits and
    // the output's last lines (wait_all waits 0.1 s for them).
    let after = killed_at.elapsed();
    for rank in 0..2u16 {
        let st = status[usize::from(rank)];
        assert!(!st.success(), "node {rank} exited {st}: {lines:#?}");
        let own: Vec<&String> = lines.iter().filter(|(r, _)| *r == rank).map(|(_, l)| l).collect();
        // The line docs/deploy.md ("When a node dies") promises, not only a worker's failed call.
        assert!(
            own.iter().any(
                |l| l.contains("node 2 failed (crashed, or silent past the peer timeout); the job stops")
            ),
            "node {rank} does not name the dead peer as docs/deploy.md says: {own:#?}"
        );
        let other = 1 - rank;
        assert!(
            !own.iter().any(|l| l.contains(&format!("node {other} failed"))),
            "node {rank} names node {other}, which did not fail: {own:#?}"
        );
    }
    assert!(after <= peer_timeout + Duration::from_secs(3), "the survivors exited {after:?} after the kill");
}

#[test]
fn options_a_node_cannot_honour_are_refused_before_anything_starts() {
    // An explicit rank, world and rendezvous where nothing listens: every refusal below comes
    // before the start-up would try to reach it.
    let node = ["node", "--rank", "0", "--world", "2", "--rendezvous", "127.0.0.1:9"];
    let cases: [(&[&str], &str); 5] = [
        (&["--keys", "5", "train", "kge"], "--keys belong to the sums workload"),
        (&["train", "kge", "--compare", "static,adaptive"], "one run"),
        (&["train", "kge", "--engine", "hogwild"], "--engine hogwild runs in one process"),
        (&["train", "kge", "--transport", "zmq"], "the node's own --transport"),
        (&["train", "kge", "--nodes", "3"], "the launcher started 2 nodes"),
    ];
    for (args, why) in cases {
        let all: Vec<&str> = node.iter().chain(args.iter()).copied().collect();
        let started = Instant::now();
        let out = parma(&all);
        let msg = text(&out);
        assert!(!out.status.success(), "parma {all:?} was accepted:\n{msg}");
        assert!(msg.contains(why), "parma {all:?}: expected `{why}` in:\n{msg}");
        assert!(!msg.contains("up, training"), "parma {all:?} started a node:\n{msg}");
        assert!(started.elapsed() < Duration::from_secs(30), "parma {all:?} waited for a rendezvous");
    }
}

#[test]
fn nodes_started_with_different_task_options_are_refused_at_the_rendezvous() {
    let a: &[&str] = &["train", "kge", "--data", "umls", "--workers", "1", "--epochs", "10"];
    let b: &[&str] = &["train", "kge", "--data", "umls", "--workers", "1", "--epochs", "11"];
    assert_refused_at_rendezvous(&[a, b], "up, training");
}

//! Clusters of `parma node` processes over ZeroMQ on 127.0.0.1: a clean run through
//! `parma launch`, a node killed with SIGKILL, a node paused with SIGSTOP.
//!
//! Every wait is bounded; a test that runs out of time kills what it started and fails.
#![forbid(unsafe_code)]

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

mod common;

use common::{
    assert_exact_sums, assert_refused_at_rendezvous, parma, spawn_nodes, text, wait_all, wait_up, DEADLINE,
};

#[test]
fn four_nodes_started_by_parma_launch_sum_exactly() {
    let out = parma(&["launch", "--nodes", "4", "--", "node", "--batches", "300", "--keys", "20000"]);
    assert_exact_sums(&out, 4);
}

#[test]
fn a_killed_node_fails_every_other_node_within_the_peer_timeout() {
    let peer_timeout = Duration::from_millis(1000);
    let args = ["--batches", "2000000", "--workers", "1", "--keys", "20000", "--peer-timeout-ms", "1000"];
    let (mut nodes, rx) = spawn_nodes(3, &args);
    let mut lines = Vec::new();
    wait_up(&mut nodes, "up, running", &rx, &mut lines);
    thread::sleep(Duration::from_millis(500));
    let killed_at = Instant::now();
    nodes[2].child.kill().expect("SIGKILL node 2");
    let mut exited = [None, None];
    let until = Instant::now() + DEADLINE;
    while exited.iter().any(Option::is_none) && Instant::now() < until {
        for (i, n) in nodes[..2].iter_mut().enumerate() {
            if exited[i].is_none() && n.child.try_wait().ok().flatten().is_some() {
                exited[i] = Some(killed_at.elapsed());
            }
        }
        thread::sleep(Duration::from_millis(5));
    }
    let status = wait_all(&mut nodes, &rx, &mut lines);
    for n in &nodes[..2] {
        let s = status[usize::from(n.rank)];
        assert!(!s.success(), "node {} exited {s} after its peer died", n.rank);
        assert!(
            lines.iter().any(|(r, l)| *r == n.rank && l.contains("node 2 failed")),
            "node {} does not name the dead peer: {lines:#?}",
            n.rank
        );
    }
    // Detection within the peer timeout plus a second; the rest is the process's exit.
    let slowest = exited.iter().flatten().max().copied().unwrap_or(DEADLINE);
    eprintln!("survivors exited {:?} after the kill (peer timeout {peer_timeout:?})", exited);
    assert!(slowest <= peer_timeout + Duration::from_secs(1) + Duration::from_secs(2), "{exited:?}");
}

#[test]
fn a_node_paused_for_less_than_the_peer_timeout_does_not_fail_the_run() {
    let args = ["--batches", "5000", "--workers", "1", "--keys", "20000", "--peer-timeout-ms", "4000"];
    let (mut nodes, rx) = spawn_nodes(3, &args);
    let mut lines = Vec::new();
    wait_up(&mut nodes, "up, running", &rx, &mut lines);
    let pid = nodes[1].child.id().to_string();
    assert!(
        nodes[1].child.try_wait().ok().flatten().is_none(),
        "node 1 ended before the pause: more batches"
    );
    let stop = Command::new("kill").args(["-STOP", &pid]).status().expect("kill -STOP");
    assert!(stop.success());
    thread::sleep(Duration::from_millis(1500));
    let cont = Command::new("kill").args(["-CONT", &pid]).status().expect("kill -CONT");
    assert!(cont.success());
    let status = wait_all(&mut nodes, &rx, &mut lines);
    for (rank, s) in status.iter().enumerate() {
        assert!(s.success(), "node {rank} exited {s}: {lines:#?}");
        assert!(
            lines.iter().any(|(r, l)| usize::from(*r) == rank && l.contains("all sums exact")),
            "node {rank}: {lines:#?}"
        );
    }
}

#[test]
fn every_technique_sums_exactly_over_three_processes() {
    for technique in [
        "adaptive",
        "adaptive-no-replication",
        "adaptive-no-relocation",
        "static",
        "relocation",
        "full-replication",
        "multi-technique",
    ] {
        let out = parma(&[
            "launch",
            "--nodes",
            "3",
            "--",
            "node",
            "--batches",
            "200",
            "--keys",
            "2000",
            "--technique",
            technique,
        ]);
        let all = text(&out);
        assert!(out.status.success(), "{technique}: {}\n{all}", out.status);
        let exact =
            String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.contains("all sums exact")).count();
        assert_eq!(exact, 3, "{technique}:\n{all}");
    }
}

/// A node heartbeats every tenth of its own peer timeout: with different timeouts, the node
/// with the longer one would look silent to the other mid-run. Refused at the start instead.
#[test]
fn nodes_with_different_peer_timeouts_are_refused_at_the_rendezvous() {
    let a: &[&str] = &["--batches", "100", "--workers", "1", "--peer-timeout-ms", "1000"];
    let b: &[&str] = &["--batches", "100", "--workers", "1", "--peer-timeout-ms", "20000"];
    assert_refused_at_rendezvous(&[a, b], "up, running");
}

#[test]
fn nodes_with_different_workload_options_are_refused_at_the_rendezvous() {
    let a: &[&str] = &["--batches", "100", "--workers", "1"];
    let b: &[&str] = &["--batches", "101", "--workers", "1"];
    assert_refused_at_rendezvous(&[a, b], "up, running");
}

//! Helpers of the tests that start `parma node` processes on 127.0.0.1 (`cluster.rs`,
//! `train_nodes.rs`): this crate's `parma` started through [`nodes`], bounded waits.
#![allow(dead_code)]

use std::process::{ExitStatus, Output};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

mod nodes;
// Each test crate that includes this module uses a part of it.
#[allow(unused_imports)]
pub use nodes::{assert_exact_sums, test_mrr, text, Node};

pub const PARMA: &str = env!("CARGO_BIN_EXE_parma");
/// Longest any process of these tests may run.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// Runs `parma args...` to its end, within [`DEADLINE`] (see [`nodes::run`]).
pub fn parma(args: &[&str]) -> Output {
    nodes::run(PARMA, args, DEADLINE)
}

/// Starts one node per entry of `args_of`, which disagree on something the rendezvous
/// compares, and checks that every node stops there saying `configuration digest mismatch`
/// and none prints `up_line`.
pub fn assert_refused_at_rendezvous(args_of: &[&[&str]], up_line: &str) {
    let (mut nodes, rx) = spawn_nodes_each(args_of);
    let mut lines = Vec::new();
    let status = wait_all(&mut nodes, &rx, &mut lines);
    for (rank, s) in status.iter().enumerate() {
        assert!(!s.success(), "node {rank} exited {s}: {lines:#?}");
        assert!(
            lines.iter().any(|(r, l)| usize::from(*r) == rank && l.contains("configuration digest mismatch")),
            "node {rank} does not say why: {lines:#?}"
        );
    }
    assert!(!lines.iter().any(|(_, l)| l.contains(up_line)), "a node started: {lines:#?}");
}

pub fn spawn_nodes(world: u16, args: &[&str]) -> (Vec<Node>, mpsc::Receiver<(u16, String)>) {
    spawn_nodes_each(&vec![args; usize::from(world)])
}

/// [`spawn_nodes`] with each rank's own arguments.
pub fn spawn_nodes_each(args_of: &[&[&str]]) -> (Vec<Node>, mpsc::Receiver<(u16, String)>) {
    nodes::spawn(PARMA, args_of, &format!("test-token-{}", std::process::id()))
}

/// Waits for every node to exit (killing all at the deadline); their statuses and output.
pub fn wait_all(
    nodes: &mut [Node],
    rx: &mpsc::Receiver<(u16, String)>,
    lines: &mut Vec<(u16, String)>,
) -> Vec<ExitStatus> {
    let until = Instant::now() + DEADLINE;
    let mut status: Vec<Option<ExitStatus>> = vec![None; nodes.len()];
    while status.iter().any(Option::is_none) {
        while let Ok(l) = rx.try_recv() {
            lines.push(l);
        }
        for (i, n) in nodes.iter_mut().enumerate() {
            if status[i].is_none() {
                status[i] = n.child.try_wait().ok().flatten();
            }
        }
        if Instant::now() > until {
            for n in nodes.iter_mut() {
                let _ = n.child.kill();
                let _ = n.child.wait();
            }
            panic!("nodes still running after {DEADLINE:?}; output so far: {lines:#?}");
        }
        thread::sleep(Duration::from_millis(10));
    }
    thread::sleep(Duration::from_millis(100));
    while let Ok(l) = rx.try_recv() {
        lines.push(l);
    }
    status.into_iter().map(|s| s.expect("exited")).collect()
}

/// Waits until every node printed a line with `up` (its start-up is done), at most a minute.
pub fn wait_up(
    nodes: &mut [Node],
    up_line: &str,
    rx: &mpsc::Receiver<(u16, String)>,
    lines: &mut Vec<(u16, String)>,
) {
    nodes::wait_up(nodes, up_line, Duration::from_secs(60), rx, lines)
}

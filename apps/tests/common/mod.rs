//! Helpers of the tests that start `parma node` processes on 127.0.0.1 (`cluster.rs`,
//! `train_nodes.rs`): spawning them with a launcher's environment, their output on a
//! channel, bounded waits.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

pub const PARMA: &str = env!("CARGO_BIN_EXE_parma");
/// Longest any process of these tests may run.
pub const DEADLINE: Duration = Duration::from_secs(120);

pub fn free_port() -> u16 {
    parma_runtime::startup::free_rendezvous_port([127, 0, 0, 1].into()).expect("a free port")
}

/// A node process whose output lines arrive on a channel, tagged with its rank.
pub struct Node {
    pub rank: u16,
    pub child: Child,
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
    let world = args_of.len() as u16;
    let rendezvous = format!("127.0.0.1:{}", free_port());
    let token = format!("test-token-{}", std::process::id());
    let (tx, rx) = mpsc::channel();
    let nodes = (0..world)
        .map(|rank| {
            let mut child = Command::new(PARMA)
                .arg("node")
                .args(args_of[usize::from(rank)])
                .env("PARMA_RANK", rank.to_string())
                .env("PARMA_WORLD_SIZE", world.to_string())
                .env("PARMA_RENDEZVOUS", &rendezvous)
                .env("PARMA_TOKEN", &token)
                .env_remove("PARMA_TOKEN_FILE")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("parma node starts");
            for pipe in [
                child.stdout.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
                child.stderr.take().map(|p| Box::new(p) as _),
            ]
            .into_iter()
            .flatten()
            {
                let tx = tx.clone();
                thread::spawn(move || {
                    for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                        let _ = tx.send((rank, line));
                    }
                });
            }
            Node { rank, child }
        })
        .collect();
    (nodes, rx)
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

/// Waits until every node printed a line with `up` (its start-up is done).
pub fn wait_up(
    world: u16,
    up_line: &str,
    rx: &mpsc::Receiver<(u16, String)>,
    lines: &mut Vec<(u16, String)>,
) {
    let until = Instant::now() + Duration::from_secs(60);
    let mut up = vec![false; usize::from(world)];
    while !up.iter().all(|u| *u) {
        let left = until.saturating_duration_since(Instant::now());
        let (rank, line) =
            rx.recv_timeout(left).unwrap_or_else(|_| panic!("nodes not up; output: {lines:#?}"));
        if line.contains(up_line) {
            up[usize::from(rank)] = true;
        }
        lines.push((rank, line));
    }
}

//! Starting `parma node` processes on 127.0.0.1 with a launcher's environment, their output
//! on a channel, and a bounded wait for their start-up: for any `parma` binary, so that the
//! tests of other crates (`transport-rdma/tests/processes.rs`) use it too.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// A node process whose output lines arrive on a channel, tagged with its rank.
pub struct Node {
    pub rank: u16,
    pub child: Child,
}

/// Starts `parma node <args_of[rank]>` from `bin` for every rank, with parma's launcher
/// variables (a fresh rendezvous port on 127.0.0.1, the world size, `token`); every line
/// either process prints arrives on the channel with its rank.
pub fn spawn(bin: &str, args_of: &[&[&str]], token: &str) -> (Vec<Node>, mpsc::Receiver<(u16, String)>) {
    let world = args_of.len() as u16;
    let port = parma_runtime::startup::free_rendezvous_port([127, 0, 0, 1].into()).expect("a free port");
    let rendezvous = format!("127.0.0.1:{port}");
    let (tx, rx) = mpsc::channel();
    let nodes = (0..world)
        .map(|rank| {
            let mut child = Command::new(bin)
                .arg("node")
                .args(args_of[usize::from(rank)])
                .env("PARMA_RANK", rank.to_string())
                .env("PARMA_WORLD_SIZE", world.to_string())
                .env("PARMA_RENDEZVOUS", &rendezvous)
                .env("PARMA_TOKEN", token)
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

/// Waits, at most `within`, until every node printed a line with `up_line` (its start-up is
/// done); kills them all and panics with their output if one does not.
pub fn wait_up(
    nodes: &mut [Node],
    up_line: &str,
    within: Duration,
    rx: &mpsc::Receiver<(u16, String)>,
    lines: &mut Vec<(u16, String)>,
) {
    let until = Instant::now() + within;
    let mut up = vec![false; nodes.len()];
    while !up.iter().all(|u| *u) {
        let left = until.saturating_duration_since(Instant::now());
        let Ok((rank, line)) = rx.recv_timeout(left) else {
            for n in nodes.iter_mut() {
                let _ = n.child.kill();
                let _ = n.child.wait();
            }
            panic!("nodes not up within {within:?}; output: {lines:#?}");
        };
        if line.contains(up_line) {
            up[usize::from(rank)] = true;
        }
        lines.push((rank, line));
    }
}

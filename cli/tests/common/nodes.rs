//! Starting `parma node` processes on 127.0.0.1 with a launcher's environment, their output
//! on a channel, and a bounded wait for their start-up; a bounded run of `parma launch` and
//! the reading of what its ranks print: for any `parma` binary, so that the tests of other
//! crates (`transport-rdma/tests/processes.rs`) use it too.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex};
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

/// Runs `bin args...` to its end with no cluster token in its environment (`parma launch`
/// makes a fresh one), reading its output as it comes, so that a chatty run never blocks on
/// a full pipe. Kills it and panics with its output so far if it runs past `deadline`.
pub fn run(bin: &str, args: &[&str], deadline: Duration) -> Output {
    let mut child = Command::new(bin)
        .args(args)
        .env_remove("PARMA_TOKEN")
        .env_remove("PARMA_TOKEN_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{bin} does not start: {e}"));
    let (done_tx, done_rx) = mpsc::channel();
    let streams: Vec<Arc<Mutex<Vec<u8>>>> = [
        child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
        child.stderr.take().map(|p| Box::new(p) as _),
    ]
    .into_iter()
    .map(|pipe| {
        let got = Arc::new(Mutex::new(Vec::new()));
        let (into, done) = (Arc::clone(&got), done_tx.clone());
        thread::spawn(move || {
            let mut buf = [0u8; 8192];
            if let Some(mut pipe) = pipe {
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    into.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(&buf[..n]);
                }
            }
            let _ = done.send(());
        });
        got
    })
    .collect();
    let take = |i: usize| std::mem::take(&mut *streams[i].lock().unwrap_or_else(|e| e.into_inner()));
    let until = Instant::now() + deadline;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            let (out, err) = (take(0), take(1));
            panic!(
                "{bin} {args:?} still ran after {deadline:?}:\n{}\n{}",
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&err)
            );
        }
        thread::sleep(Duration::from_millis(20));
    };
    // The pipes close when the process and anything it left behind have exited; a straggler
    // holding them open does not hold the test.
    let drained = Instant::now() + Duration::from_secs(5);
    for _ in 0..2 {
        let _ = done_rx.recv_timeout(drained.saturating_duration_since(Instant::now()));
    }
    Output { status, stdout: take(0), stderr: take(1) }
}

/// Both streams of `out`, as text.
pub fn text(out: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The test MRR that rank 0 printed (`[0] done: test MRR 0.9181, ...`).
pub fn test_mrr(all: &str) -> f64 {
    let line = all
        .lines()
        .find(|l| l.starts_with("[0] done: test MRR "))
        .unwrap_or_else(|| panic!("no test MRR from rank 0:\n{all}"));
    let v = line.trim_start_matches("[0] done: test MRR ").split(',').next().expect("a value");
    v.parse().unwrap_or_else(|_| panic!("not a number: {line}"))
}

/// Checks that `out` is a successful `parma launch` of `world` sums workloads (`parma node`)
/// in which every rank reported exact sums.
pub fn assert_exact_sums(out: &Output, world: u16) {
    let all = text(out);
    assert!(out.status.success(), "parma launch failed: {}\n{all}", out.status);
    for rank in 0..world {
        let line = format!("[{rank}] node {rank} of {world} (parma):");
        assert!(
            all.lines().any(|l| l.starts_with(&line) && l.contains("all sums exact")),
            "no exact sums from rank {rank}:\n{all}"
        );
    }
}

//! `parma launch` starting `parma launch-probe` processes: prefixes, exit statuses, and that a
//! failing or killed rank, or a signal to the launcher, stops every node quickly and leaves
//! no process behind. Every wait is bounded.
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const PARMA: &str = env!("CARGO_BIN_EXE_parma");
/// Longest any launch in these tests may take.
const BOUND: Duration = Duration::from_secs(30);

fn parma(args: &[&str]) -> Command {
    let mut cmd = Command::new(PARMA);
    cmd.args(args).stdin(Stdio::null());
    // The test's own environment must not choose the launcher or the token for the children.
    for var in ["PARMA_TOKEN", "PARMA_TOKEN_FILE", "PARMA_RENDEZVOUS", "PARMA_ADVERTISE_HOST"] {
        cmd.env_remove(var);
    }
    cmd
}

/// Runs a launch to its end, within `BOUND`.
fn run(args: &[&str]) -> (Output, Duration) {
    let started = Instant::now();
    let mut child = parma(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    wait_bounded(&mut child);
    (child.wait_with_output().unwrap(), started.elapsed())
}

fn wait_bounded(child: &mut Child) {
    let until = Instant::now() + BOUND;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            panic!("the launcher did not finish within {BOUND:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// The probes' pids, from their `[r] rank r of n, pid P` lines.
fn pids(stdout: &str) -> Vec<i32> {
    stdout.lines().filter_map(|l| l.split(", pid ").nth(1)).map(|p| p.trim().parse().unwrap()).collect()
}

fn assert_gone(pids: &[i32]) {
    for &pid in pids {
        assert_eq!(kill(Pid::from_raw(pid), None), Err(nix::errno::Errno::ESRCH), "pid {pid} is still there");
    }
}

#[test]
fn every_line_is_prefixed_with_its_rank_and_all_ranks_meet() {
    let (out, _) = run(&["launch", "--nodes", "3", "--", "launch-probe", "--rendezvous"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for r in 0..3 {
        assert!(stdout.lines().any(|l| l.starts_with(&format!("[{r}] rank {r} of 3, pid "))), "{stdout}");
        let table = format!("[{r}] table: 3 nodes, digest 0x0000000000009e0b, this node rank {r}: ");
        let line = stdout.lines().find(|l| l.starts_with(&table)).unwrap_or_else(|| panic!("{stdout}"));
        assert!(line.ends_with("probe://rank-0 probe://rank-1 probe://rank-2"), "{line}");
        assert!(stderr.lines().any(|l| l == format!("[{r}] probe stderr of rank {r}")), "{stderr}");
    }
    assert!(stdout.lines().all(|l| l.starts_with('[')), "{stdout}");
    assert_eq!(pids(&stdout).len(), 3);
    assert_gone(&pids(&stdout));
}

#[test]
fn a_failing_rank_stops_the_others_and_is_named() {
    let args = ["launch", "--nodes", "3", "--grace-ms", "2000", "--", "launch-probe", "--fail-rank", "1"];
    let (out, took) =
        run(&[&args[..], &["--exit-code", "3", "--fail-after-ms", "200", "--sleep-ms", "60000"]].concat());
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("parma launch: rank 1 exited with status 3; stopped ranks 0, 2 with SIGTERM\n"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_gone(&pids(&stdout));
}

#[test]
fn ranks_that_ignore_sigterm_get_sigkill_after_the_grace_period() {
    let args = [
        "launch",
        "--nodes",
        "3",
        "--grace-ms",
        "300",
        "--",
        "launch-probe",
        "--ignore-term",
        "--fail-rank",
        "0",
    ];
    let (out, took) = run(&[&args[..], &["--fail-after-ms", "1000", "--sleep-ms", "60000"]].concat());
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let expect = "rank 0 exited with status 1; stopped ranks 1, 2 with SIGTERM, then ranks 1, 2 with SIGKILL after 0.3 s";
    assert!(stderr.contains(expect), "{stderr}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_gone(&pids(&stdout));
}

/// A launcher of `nodes` long-sleeping probes, and their pids once they all started.
fn start_sleepers(nodes: usize) -> (Child, Vec<i32>, mpsc::Receiver<String>) {
    let n = nodes.to_string();
    let args = ["launch", "--nodes", &n, "--grace-ms", "2000", "--", "launch-probe", "--sleep-ms", "60000"];
    let mut child = parma(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let (tx, rx) = mpsc::channel();
    let (out, err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let tx2 = tx.clone();
    thread::spawn(move || BufReader::new(out).lines().map_while(Result::ok).for_each(|l| drop(tx.send(l))));
    thread::spawn(move || BufReader::new(err).lines().map_while(Result::ok).for_each(|l| drop(tx2.send(l))));
    let mut pids = Vec::new();
    let until = Instant::now() + BOUND;
    while pids.len() < nodes {
        let line =
            rx.recv_timeout(until.saturating_duration_since(Instant::now())).expect("the probes started");
        pids.extend(self::pids(&line));
    }
    (child, pids, rx)
}

/// Everything the launcher wrote after the probes started, once it exited.
fn rest(rx: &mpsc::Receiver<String>) -> String {
    let mut lines = Vec::new();
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(2)) {
        lines.push(l);
    }
    lines.join("\n")
}

#[test]
fn sigterm_to_the_launcher_stops_every_node() {
    let (mut launcher, pids, rx) = start_sleepers(2);
    kill(Pid::from_raw(launcher.id() as i32), Signal::SIGTERM).unwrap();
    let started = Instant::now();
    wait_bounded(&mut launcher);
    let status = launcher.wait().unwrap();
    assert_eq!(status.code(), Some(128 + 15));
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    let said = rest(&rx);
    assert!(said.contains("parma launch: got SIGTERM; stopping the nodes"), "{said}");
    assert_gone(&pids);
}

#[cfg(target_os = "linux")]
#[test]
fn the_nodes_end_when_the_launcher_is_killed() {
    let (mut launcher, pids, _rx) = start_sleepers(2);
    launcher.kill().unwrap();
    launcher.wait().unwrap();
    // Their parent-death signal is SIGTERM; they are reaped by init (or a subreaper).
    let until = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|&p| alive(p)) && Instant::now() < until {
        thread::sleep(Duration::from_millis(20));
    }
    assert!(pids.iter().all(|&p| !alive(p)), "{pids:?}");
}

/// Whether `pid` runs (a zombie waiting for its reaper does not).
#[cfg(target_os = "linux")]
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

#[test]
fn a_rank_killed_by_a_signal_is_named() {
    let (mut launcher, pids, rx) = start_sleepers(3);
    kill(Pid::from_raw(pids[1]), Signal::SIGKILL).unwrap();
    wait_bounded(&mut launcher);
    assert_eq!(launcher.wait().unwrap().code(), Some(1));
    let said = rest(&rx);
    assert!(said.contains("was killed by SIGKILL; stopped ranks"), "{said}");
    assert_gone(&pids);
}

#[test]
fn launch_needs_a_subcommand_and_a_node_count_in_range() {
    for args in [
        &["launch", "--nodes", "2"][..],
        &["launch", "--nodes", "0", "--", "launch-probe"],
        &["launch", "--nodes", "4097", "--", "x"],
    ] {
        let (out, _) = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

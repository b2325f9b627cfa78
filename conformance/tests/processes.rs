//! The process executor against agents that misbehave, played by `sh`: a start-up that
//! fails, nonsense on stdout, an agent that dies, answers that do not fit; and every agent
//! killed and reaped when the executor goes. (The real agents run in
//! `cli/tests/conformance_processes.rs`, which can see the `parma` binary.)
#![cfg(target_os = "linux")]
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use parma_conformance::process::{AgentCommand, ProcessExecutor};
use parma_conformance::trace::{setup_from, Executor, Setup};
use parma_core::{Key, NodeId, OpError, WorkerId};

fn setup() -> Setup {
    setup_from("cluster nodes=2 workers=1 keys=4 len=1").unwrap()
}

/// An agent played by `sh -c script`.
fn sh(script: &str) -> AgentCommand {
    AgentCommand { program: PathBuf::from("sh"), args: vec!["-c".into(), script.into()] }
}

/// Reads the setup and answers `Ready` with it, as a real agent does.
const READY: &str = r#"read l; printf '{"Ok":{"Ready":{"setup":%s}}}\n' "$l""#;

#[test]
fn an_agent_that_exits_fails_the_start() {
    let e = ProcessExecutor::start(&setup(), &sh("echo 'no rendezvous here' >&2; exit 3"))
        .err()
        .expect("the start fails");
    assert!(e.contains("(it exited: exit status: 3); its stderr ends:\n  no rendezvous here"), "{e}");
}

#[test]
fn an_agent_that_writes_nonsense_fails_the_start() {
    let e = ProcessExecutor::start(&setup(), &sh("cat")).err().expect("the start fails");
    assert!(e.contains("cannot read"), "{e}");
}

#[test]
fn an_agent_that_dies_ends_its_calls_and_fails_the_trace() {
    let mut exec = ProcessExecutor::start(&setup(), &sh(READY)).unwrap();
    assert_eq!(exec.pull(NodeId(0), WorkerId(0), &[Key(1)]), Err(OpError::Closed));
    // Broken: not asked again.
    assert_eq!(exec.pull(NodeId(0), WorkerId(0), &[Key(1)]), Err(OpError::Closed));
    assert_eq!(exec.pull(NodeId(5), WorkerId(0), &[Key(1)]), Err(OpError::InvalidArgument));
    let e = exec.finish().unwrap_err();
    assert!(e.contains("the agent of node 0: "), "{e}");
}

#[test]
fn answers_that_do_not_fit_fail_the_trace() {
    let script = format!(r#"{READY}; while read r; do echo '{{"Ok":"Done"}}'; done"#);
    let mut exec = ProcessExecutor::start(&setup(), &sh(&script)).unwrap();
    assert_eq!(exec.pull(NodeId(1), WorkerId(0), &[Key(1)]), Err(OpError::InvalidArgument));
    assert_eq!(exec.write(NodeId(1), WorkerId(0), false, &[Key(1)], &[1.0]), Ok(()));
    let e = exec.finish().unwrap_err();
    assert!(e.contains("the agent of node 1 answered Done, which does not fit the call"), "{e}");
}

/// Whether process `pid` still exists (a zombie, not reaped, counts).
fn exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn every_agent_is_killed_and_reaped_when_the_executor_goes() {
    let dir = std::env::temp_dir().join(format!("parma-agents-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pids = dir.join("pids");
    // Each agent notes its pid, says it is ready, then ignores everything for 10 minutes.
    let script = format!("echo $$ >> {}; {READY}; exec sleep 600", pids.display());
    let exec = ProcessExecutor::start(&setup(), &sh(&script)).unwrap();
    let pids: Vec<u32> =
        std::fs::read_to_string(&pids).unwrap().lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(pids.len(), 2);
    assert!(pids.iter().all(|p| exists(*p)));
    let t = Instant::now();
    drop(exec);
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(pids.iter().all(|p| !exists(*p)), "agents {pids:?} outlived the executor");
    let _ = std::fs::remove_dir_all(&dir);
}

//! `parma node --transport rdma` where the RDMA device it needs does not exist: every node
//! stops at once, before the rendezvous waits on anyone, with a message that says no device
//! was found, what was looked for, and where to go (the rdma-vm, docs/deploy.md, ZeroMQ).
//!
//! Built only with the `rdma` feature. CI runs it on its host, which has no RDMA device
//! (`cargo test --release -p parma-cli --features rdma --test rdma_no_device`); on a host
//! that has one the test asks for a device name no host has, which takes the same path.
#![cfg(feature = "rdma")]
#![forbid(unsafe_code)]

use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

const PARMA: &str = env!("CARGO_BIN_EXE_parma");
/// Far beyond the few milliseconds a refusal takes; a node that waited on the rendezvous or
/// on a peer instead would run into it.
const BOUND: Duration = Duration::from_secs(60);
const ABSENT: &str = "parma-test-absent0";

fn host_has_a_device() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

#[test]
fn an_rdma_node_without_a_device_says_so_and_where_to_go() {
    let mut cmd = Command::new(PARMA);
    cmd.args(["launch", "--nodes", "2", "--", "node", "--transport", "rdma"])
        .args(["train", "kge", "--data", "umls", "--workers", "1", "--epochs", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for var in ["PARMA_TOKEN", "PARMA_TOKEN_FILE", "PARMA_RENDEZVOUS", "PARMA_RDMA_DEVICE"] {
        cmd.env_remove(var);
    }
    let named = host_has_a_device();
    if named {
        cmd.env("PARMA_RDMA_DEVICE", ABSENT);
    }
    let child = cmd.spawn().expect("parma starts");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let t0 = Instant::now();
    let out = match rx.recv_timeout(BOUND) {
        Ok(out) => out.expect("parma's output"),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("parma launch with no RDMA device still ran after {BOUND:?}");
        }
    };
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "a node without an RDMA device must fail:\n{all}");
    // The launcher stops the other node when the first one fails, so one refusal may be all
    // there is; every node that got as far as its transport refused the same way.
    let refusals: Vec<&str> = all.lines().filter(|l| l.contains("the transport did not start")).collect();
    assert!(!refusals.is_empty(), "no node said why its transport did not start:\n{all}");
    for line in &refusals {
        for says in [
            "no RDMA device found",
            if named { "the device `parma-test-absent0` (PARMA_RDMA_DEVICE)" } else { "any device" },
            "/sys/class/infiniband",
            "../shared/tools/rdma-vm",
            "docs/deploy.md",
            "--transport zmq",
        ] {
            assert!(line.contains(says), "a refusal does not say `{says}`:\n{line}");
        }
        // The old message, a bare errno from the verbs library, must not be all there is.
        assert!(!line.contains("RDMA device: Function not implemented"), "{line}");
    }
    assert!(!all.contains("node 0 of 2: up"), "a node got past its transport:\n{all}");
    eprintln!("refused in {:?}: {}", t0.elapsed(), refusals[0]);
}

//! Nodes on IPv6 loopback, and a node that advertises what it is told.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use parma_core::transport::Transport;
use parma_core::NodeId;
use parma_runtime::startup::ClusterToken;
use parma_transport_zmq::{local_cluster, Bound, ZmqOptions, ZmqTransport};

/// Sends `n` numbered frames each way between nodes 0 and 1 and checks they all arrive in
/// order (bounded in time).
fn exchange(ends: &mut [ZmqTransport], n: u32) {
    let mut next = [0u32; 2];
    let mut sent = [0u32; 2];
    let until = Instant::now() + Duration::from_secs(30);
    while next != [n, n] {
        assert!(Instant::now() < until, "frames missing after 30 s: {next:?} of {n}");
        for i in 0..2 {
            while sent[i] < n {
                let bytes = sent[i].to_le_bytes();
                match ends[i].try_send(NodeId(1 - i as u16), 4, &mut |b| b.copy_from_slice(&bytes)) {
                    Ok(()) => sent[i] += 1,
                    Err(_) => break,
                }
            }
            let mut got = Vec::new();
            ends[i].poll_recv(usize::MAX, &mut |from, f| got.push((from, f.to_vec()))).expect("open");
            for (from, f) in got {
                assert_eq!(from, NodeId(1 - i as u16));
                let v = u32::from_le_bytes(f.try_into().expect("4 bytes"));
                assert_eq!(v, next[i], "out of order at node {i}");
                next[i] += 1;
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

#[test]
fn nodes_talk_over_ipv6_loopback() {
    let opts = ZmqOptions::loopback().with_bind("tcp://[::1]:0");
    let mut ends = local_cluster(2, &opts, 7, Arc::new(ClusterToken::generate())).expect("[::1] binds");
    exchange(&mut ends, 2000);
}

#[test]
fn a_node_bound_on_every_address_advertises_the_one_it_is_told() {
    let token = Arc::new(ClusterToken::generate());
    let wild = ZmqOptions::loopback().with_bind("tcp://0.0.0.0:0").with_advertise(Some("127.0.0.1".into()));
    let a = Bound::bind(wild).expect("binds");
    assert!(a.endpoint().starts_with("tcp://127.0.0.1:"), "{}", a.endpoint());
    let b = Bound::bind(ZmqOptions::loopback()).expect("binds");
    let table = vec![a.endpoint().to_string(), b.endpoint().to_string()];
    let mut ends = vec![
        a.start(NodeId(0), table.clone(), 7, token.clone()).expect("starts"),
        b.start(NodeId(1), table, 7, token).expect("starts"),
    ];
    exchange(&mut ends, 500);
}

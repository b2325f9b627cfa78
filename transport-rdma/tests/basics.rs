//! A few direct checks on the RDMA device (in CI: inside the VM), with the reason of any
//! failure printed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parma_core::transport::{Transport, TransportEvent};
use parma_core::NodeId;
use parma_runtime::startup::ClusterToken;
use parma_transport_rdma::{local_cluster, local_cluster_with, Bound, RdmaOptions, RdmaTransport, Wire};

/// Small rings of either wire: frames above 4 KiB go in chunks.
fn opts_for(wire: Wire) -> RdmaOptions {
    let mut o = RdmaOptions::loopback();
    o.wire = wire;
    o.slot_len = 4096;
    o.recv_slots = 8;
    o.send_slots = 8;
    o.ring_len = 8192;
    o.ring_msgs = 8;
    o.frame_len_max = 1 << 20;
    o.heartbeat_interval = Duration::from_millis(100);
    o.peer_timeout = Duration::from_secs(1);
    o.linger = Duration::from_millis(300);
    o
}

fn opts() -> RdmaOptions {
    opts_for(RdmaOptions::loopback().wire)
}

fn cluster_of(n: u16, o: &RdmaOptions) -> Vec<RdmaTransport> {
    local_cluster(n, o, 7, Arc::new(ClusterToken::generate())).expect("a cluster on the RDMA device")
}

fn cluster(n: u16) -> Vec<RdmaTransport> {
    cluster_of(n, &opts())
}

/// Two transports started from their own options (which should agree, and here need not).
fn pair(o: [RdmaOptions; 2]) -> Vec<RdmaTransport> {
    local_cluster_with(&o, 7, Arc::new(ClusterToken::generate())).expect("start")
}

fn failures(ts: &[RdmaTransport]) -> String {
    let mut s = String::new();
    for t in ts {
        for p in 0..4 {
            if let Some(f) = t.failure(NodeId(p)) {
                s += &format!("node {} sees node {p} failed: {f}\n", t.local_id().0);
            }
        }
    }
    s
}

/// Sends `frames` of the given lengths from 0 to 1 and checks they arrive intact, in order.
fn round(ts: &mut [RdmaTransport], lens: &[usize]) {
    let mut sent = 0;
    let mut got: Vec<Vec<u8>> = Vec::new();
    let until = Instant::now() + Duration::from_secs(30);
    while got.len() < lens.len() {
        assert!(Instant::now() < until, "frames missing: {} of {}\n{}", got.len(), lens.len(), failures(ts));
        while sent < lens.len() {
            let len = lens[sent];
            let r = ts[0].try_send(NodeId(1), len, &mut |b| {
                for (i, x) in b.iter_mut().enumerate() {
                    *x = (i as u8).wrapping_add(sent as u8);
                }
            });
            match r {
                Ok(()) => sent += 1,
                Err(parma_core::transport::SendError::WouldBlock) => break,
                Err(e) => panic!("send: {e:?}\n{}", failures(ts)),
            }
        }
        ts[1]
            .poll_recv(64, &mut |from, f| {
                assert_eq!(from, NodeId(0));
                got.push(f.to_vec());
            })
            .expect("receiving");
        std::thread::sleep(Duration::from_micros(200));
    }
    for (k, (f, &len)) in got.iter().zip(lens).enumerate() {
        assert_eq!(f.len(), len, "frame {k}");
        assert!(
            f.iter().enumerate().all(|(i, &x)| x == (i as u8).wrapping_add(k as u8)),
            "frame {k} garbled"
        );
    }
}

fn every_shape(wire: Wire) {
    let mut ts = cluster_of(2, &opts_for(wire));
    round(&mut ts, &[0, 1, 4095, 4096, 4097, 10_000, 65_536, 1 << 20]);
    // More than the credits, so that they must come back; in the ring, every length from
    // empty to half the ring, so that records skip its end at many offsets.
    let many: Vec<usize> = (0..200).map(|i| (i * 37) % 9000).collect();
    round(&mut ts, &many);
    let small: Vec<usize> = (0..600).map(|i| (i * 997) % 4097).collect();
    round(&mut ts, &small);
    assert_eq!(failures(&ts), "");
}

#[test]
fn frames_of_every_shape_arrive_intact_through_the_ring() {
    every_shape(Wire::Ring);
}

#[test]
fn frames_of_every_shape_arrive_intact_through_send_slots() {
    every_shape(Wire::Send);
}

/// Small frames sent faster than they complete leave packed: one WRITE carries several
/// (fewer packets than frames, mailbox writes included), and every frame arrives whole and
/// in order, with every length from empty up.
#[test]
fn small_frames_sent_in_a_burst_share_writes_and_arrive_intact() {
    let mut o = opts_for(Wire::Ring);
    o.ring_len = 64 << 10;
    o.ring_msgs = 256;
    o.send_slots = 32;
    let mut ts = cluster_of(2, &o);
    let lens: Vec<usize> = (0..3000).map(|i| (i * 61) % 1500).collect();
    round(&mut ts, &lens);
    let c = ts[0].counters();
    eprintln!("{} frames in {} packets", c.frames_sent, c.packets_sent);
    assert_eq!(c.frames_sent, 3000);
    assert!(
        c.packets_sent < c.frames_sent,
        "{} frames went in {} packets: none shared a WRITE",
        c.frames_sent,
        c.packets_sent
    );
    assert_eq!(failures(&ts), "");
}

/// A peer's record that breaks the ring fails that peer, with the reason, and nothing else.
/// Node 0 is (wrongly) set up with a ring four times node 1's, so its frame of 5,000 bytes
/// (one WRITE at offset 0 of 5,004 bytes with its head, inside node 1's 8 KiB ring) is more
/// than half node 1's ring.
#[test]
fn a_broken_ring_record_fails_the_peer() {
    let mut big = opts_for(Wire::Ring);
    big.ring_len = 32 << 10;
    let mut ts = pair([big, opts_for(Wire::Ring)]);
    std::thread::sleep(Duration::from_millis(200));
    ts[0].try_send(NodeId(1), 5000, &mut |b| b.fill(1)).expect("accepted");
    // A bound against a hang, not a measurement.
    let until = Instant::now() + Duration::from_secs(30);
    let ev = loop {
        if let Some(ev) = ts[1].poll_event() {
            break ev;
        }
        assert!(Instant::now() < until, "the broken record was never reported: {}", failures(&ts));
        let n = ts[1].poll_recv(16, &mut |_, f| panic!("a frame of {} bytes handed out", f.len()));
        assert_eq!(n, Ok(0));
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(ev, TransportEvent::PeerFailed(NodeId(0)));
    let why = ts[1].failure(NodeId(0)).unwrap_or_default();
    assert!(why.contains("a record of 5004 bytes in a ring of 8192"), "failed for another reason: {why}");
}

#[test]
fn a_killed_node_is_reported_within_the_peer_timeout() {
    let mut ts = cluster(3);
    let kill = ts[2].kill_switch();
    let t0 = Instant::now();
    kill.kill();
    let mut seen = [false; 2];
    while !(seen[0] && seen[1]) {
        assert!(
            t0.elapsed() < opts().peer_timeout + Duration::from_secs(1),
            "not reported in time: {seen:?}"
        );
        for (i, t) in ts.iter_mut().take(2).enumerate() {
            while let Some(ev) = t.poll_event() {
                assert_eq!(ev, TransportEvent::PeerFailed(NodeId(2)));
                seen[i] = true;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    eprintln!("reported after {:?}: {}", t0.elapsed(), failures(&ts[..2]));
}

/// A node that stops because it lost a peer names that peer in its goodbye. Node 2 is killed
/// (no goodbye); node 1 finds it silent within its 1 s timeout and closes; node 0, whose own
/// timeout is 30 s, must report node 2 failed first, as node 1's goodbye named it, then node 1.
#[test]
fn a_goodbye_names_the_peer_its_sender_lost() {
    let mut slow = opts();
    slow.peer_timeout = Duration::from_secs(30);
    let mut ts =
        local_cluster_with(&[slow, opts(), opts()], 7, Arc::new(ClusterToken::generate())).expect("start");
    let kill = ts[2].kill_switch();
    let t0 = Instant::now();
    kill.kill();
    let mut lost_by_1 = Vec::new();
    while lost_by_1.is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(5), "node 1 did not notice: {}", failures(&ts));
        while let Some(TransportEvent::PeerFailed(p)) = ts[1].poll_event() {
            lost_by_1.push(p);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(lost_by_1, [NodeId(2)]);
    ts[1].close();
    let mut lost_by_0 = Vec::new();
    let until = Instant::now() + Duration::from_secs(5);
    while lost_by_0.len() < 2 && Instant::now() < until {
        let _ = ts[0].poll_recv(64, &mut |_, _| {});
        while let Some(TransportEvent::PeerFailed(p)) = ts[0].poll_event() {
            lost_by_0.push(p);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    eprintln!("node 0 reported {lost_by_0:?} after {:?}: {}", t0.elapsed(), failures(&ts));
    assert_eq!(lost_by_0, [NodeId(2), NodeId(1)], "{}", failures(&ts));
    let why = ts[0].failure(NodeId(2)).unwrap_or_default();
    assert!(why.contains("named by node 1"), "node 0 found node 2 failed by itself: {why}");
}

/// A send that fails completes in error whether it was signalled or not (RC), and fails
/// the peer. Node 1 is (wrongly) set up with receive slots half as long as node 0's send
/// slots, so node 0's one frame of 6,000 bytes (a single SEND, unsignalled: one in
/// `send_slots / 4` is signalled, and slots are free) overruns node 1's receive: the
/// responder rejects it and node 0's SEND completes in error, with no heartbeat or credit
/// write in flight to report it instead.
#[test]
fn an_unsignalled_send_that_fails_fails_the_peer() {
    let mut o = opts_for(Wire::Send);
    o.slot_len = 8192;
    // No heartbeat write after the first ones, no silence timeout within the test.
    o.heartbeat_interval = Duration::from_secs(60);
    o.peer_timeout = Duration::from_secs(120);
    let mut short = o.clone();
    short.slot_len = 4096;
    let mut ts = pair([o, short]);
    // Let the start-up heartbeats complete first.
    std::thread::sleep(Duration::from_millis(200));
    ts[0].try_send(NodeId(1), 6000, &mut |b| b.fill(1)).expect("accepted");
    // A bound against a hang, not a measurement.
    let until = Instant::now() + Duration::from_secs(60);
    let ev = loop {
        if let Some(ev) = ts[0].poll_event() {
            break ev;
        }
        assert!(Instant::now() < until, "the failed send was never reported: {:?}", ts[0].stats());
        let _ = ts[0].poll_recv(16, &mut |_, _| {});
        let _ = ts[1].poll_recv(16, &mut |_, _| {});
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(ev, TransportEvent::PeerFailed(NodeId(1)));
    let why = ts[0].failure(NodeId(1)).unwrap_or_default();
    assert!(why.contains("work request failed"), "failed for another reason: {why}");
    eprintln!("node 0: {why}; node 1: {:?}", ts[1].failure(NodeId(0)));
}

/// A device name the host does not have: the node refuses before it listens or waits, and
/// says which device it looked for and which ones there are.
#[test]
fn a_device_that_is_not_there_is_named_with_the_ones_that_are() {
    let mut o = opts();
    o.device = Some("parma-test-absent0".into());
    let why = match parma_transport_rdma::Bound::bind(o) {
        Ok(_) => panic!("bound with a device that does not exist"),
        Err(e) => e.to_string(),
    };
    eprintln!("{why}");
    assert!(why.starts_with("no RDMA device found"), "{why}");
    assert!(why.contains("the device `parma-test-absent0`"), "{why}");
    let real = std::env::var("RDMA_VM_DEVICE").unwrap_or_else(|_| "rxe0".into());
    assert!(why.contains(&format!("libibverbs lists only {real}")), "{why}");
    assert!(why.contains("/sys/class/infiniband has"), "{why}");
}

/// Starts a pair whose options are `o` and refuses to connect; returns each node's error.
fn refused_pair(o: [RdmaOptions; 2]) -> [String; 2] {
    let bound = o.map(|o| Bound::bind(o).expect("bind"));
    let table: Vec<String> = bound.iter().map(|b| b.endpoint().to_string()).collect();
    let token: Arc<ClusterToken> = Arc::new(ClusterToken::generate());
    let errors = std::thread::scope(|s| {
        let hs: Vec<_> = bound
            .into_iter()
            .enumerate()
            .map(|(i, b)| {
                let (table, token) = (table.clone(), token.clone());
                s.spawn(move || b.start(NodeId(i as u16), table, 7, token).err().map(|e| e.to_string()))
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("a start-up thread")).collect::<Vec<_>>()
    });
    match &errors[..] {
        [Some(a), Some(b)] => [a.clone(), b.clone()],
        _ => panic!("the pair started: {errors:?}"),
    }
}

/// Nodes whose longest frames differ, or one of whose heartbeats come less often than the
/// other gives up on it, refuse each other at start-up and both say why; peer timeouts that
/// merely differ are fine (`a_goodbye_names_the_peer_its_sender_lost` starts such a cluster).
#[test]
fn nodes_whose_terms_disagree_refuse_each_other_and_say_why() {
    let mut o = opts();
    o.connect_timeout = Duration::from_secs(3);
    let mut longer = o.clone();
    longer.frame_len_max = 2 << 20;
    let [dialer, acceptor] = refused_pair([o.clone(), longer]);
    eprintln!("node 0: {dialer}\nnode 1: {acceptor}");
    assert!(dialer.contains("its frame_len_max is 2097152 bytes, this node's 1048576"), "{dialer}");
    assert!(
        acceptor.contains("node 0: its frame_len_max is 1048576 bytes, this node's 2097152"),
        "{acceptor}"
    );

    let mut slow = o.clone();
    slow.heartbeat_interval = Duration::from_secs(2);
    slow.peer_timeout = Duration::from_secs(10);
    let [dialer, acceptor] = refused_pair([o, slow]);
    eprintln!("node 0: {dialer}\nnode 1: {acceptor}");
    assert!(
        dialer.contains("heartbeat interval (2000 ms) is not below this node's peer timeout (1000 ms)"),
        "{dialer}"
    );
    assert!(
        acceptor.contains("peer timeout (1000 ms) is not above this node's heartbeat interval (2000 ms)"),
        "{acceptor}"
    );
}

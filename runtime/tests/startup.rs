//! Start-up through the public API, with node threads standing in for node processes, on
//! 127.0.0.1. Every test is bounded by the rendezvous's and the nodes' timeouts.
#![forbid(unsafe_code)]

use std::thread;
use std::time::{Duration, Instant};

use parma_core::NodeId;
use parma_runtime::startup::{
    establish, join, ClusterToken, Launch, PeerTable, Rendezvous, RendezvousAddr, RendezvousOptions, Role,
    StartupError,
};

const DIGEST: u64 = 0xfeed_f00d;

fn token() -> ClusterToken {
    ClusterToken::from_secret(*b"integration test token").unwrap()
}

/// A port nothing listens on right now (the kernel's next ephemeral one).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn env(vars: Vec<(&'static str, String)>) -> impl Fn(&str) -> Option<String> {
    move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone())
}

fn parma_launch(rank: u16, world: u16, port: u16) -> Launch {
    let vars = vec![
        ("PARMA_RANK", rank.to_string()),
        ("PARMA_WORLD_SIZE", world.to_string()),
        ("PARMA_RENDEZVOUS", format!("127.0.0.1:{port}")),
    ];
    Launch::from_env(env(vars)).unwrap()
}

fn ps_lite_launch(role: &str, servers: u16, port: u16) -> Launch {
    let vars = vec![
        ("DMLC_ROLE", role.to_string()),
        ("DMLC_NUM_SERVER", servers.to_string()),
        ("DMLC_NUM_WORKER", "0".to_string()),
        ("DMLC_PS_ROOT_URI", "127.0.0.1".to_string()),
        ("DMLC_PS_ROOT_PORT", port.to_string()),
    ];
    Launch::from_env(env(vars)).unwrap()
}

fn endpoint(i: u16) -> String {
    format!("tcp://127.0.0.1:{}", 41000 + i)
}

fn establish_on_thread(
    launch: Launch,
    i: u16,
    timeout: Duration,
) -> thread::JoinHandle<Result<PeerTable, StartupError>> {
    thread::spawn(move || establish(&launch, &endpoint(i), DIGEST, &token(), timeout))
}

#[test]
fn every_rank_gets_the_same_table_even_when_rank_0_starts_last() {
    let (world, port, timeout) = (4, free_port(), Duration::from_secs(20));
    let started = Instant::now();
    let mut nodes: Vec<_> = (1..world)
        .rev()
        .map(|r| (r, establish_on_thread(parma_launch(r, world, port), r, timeout)))
        .collect();
    // The others retry until rank 0's rendezvous is up.
    thread::sleep(Duration::from_millis(400));
    nodes.push((0, establish_on_thread(parma_launch(0, world, port), 0, timeout)));
    let mut tables = Vec::new();
    for (r, h) in nodes {
        let table = h.join().unwrap().unwrap();
        assert_eq!((table.me(), table.world(), table.digest()), (Some(NodeId(r)), world, DIGEST));
        tables.push(table);
    }
    for t in &tables {
        let endpoints: Vec<(NodeId, &str)> = t.iter().collect();
        let expect: Vec<String> = (0..world).map(endpoint).collect();
        assert_eq!(endpoints.iter().map(|(_, e)| e.to_string()).collect::<Vec<_>>(), expect);
        assert_eq!(t.endpoint(NodeId(world)), None);
    }
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
}

#[test]
fn ps_lite_servers_get_ranks_in_arrival_order_and_the_scheduler_only_serves() {
    let (servers, port, timeout) = (3, free_port(), Duration::from_secs(20));
    let scheduler = establish_on_thread(ps_lite_launch("scheduler", servers, port), 99, timeout);
    let worker = ps_lite_launch("worker", servers, port);
    assert_eq!(worker.role(), Role::Worker);
    let e = establish(&worker, "tcp://127.0.0.1:1", DIGEST, &token(), timeout).unwrap_err();
    assert!(matches!(e, StartupError::NotANode { role: Role::Worker }), "{e}");
    let mut nodes = Vec::new();
    for i in 0..servers {
        let launch = ps_lite_launch("server", servers, port);
        assert_eq!((launch.role(), launch.rank()), (Role::Node, None));
        nodes.push(establish_on_thread(launch, i, timeout));
        // Arrival order is registration order: let each register before the next comes.
        thread::sleep(Duration::from_millis(300));
    }
    for (i, h) in nodes.into_iter().enumerate() {
        let table = h.join().unwrap().unwrap();
        assert_eq!(table.me(), Some(NodeId(i as u16)), "{table}");
        assert_eq!(table.endpoint(NodeId(i as u16)), Some(endpoint(i as u16).as_str()));
    }
    let table = scheduler.join().unwrap().unwrap();
    assert_eq!((table.me(), table.world()), (None, servers));
}

#[test]
fn a_wrong_token_is_caught_by_the_node_and_counted_by_rank_0() {
    let (port, timeout) = (free_port(), Duration::from_millis(1500));
    let rank0 = establish_on_thread(parma_launch(0, 2, port), 0, timeout);
    thread::sleep(Duration::from_millis(200));
    let other = ClusterToken::from_secret(*b"not the cluster's token").unwrap();
    let e = establish(&parma_launch(1, 2, port), &endpoint(1), DIGEST, &other, timeout).unwrap_err();
    assert!(matches!(e, StartupError::WrongToken { .. }), "{e}");
    assert!(e.to_string().contains("different cluster tokens"), "{e}");
    let e = rank0.join().unwrap().unwrap_err().to_string();
    assert!(
        e.starts_with("rank 1 of 2 did not register within 1.") && e.ends_with("1 without the token"),
        "{e}"
    );
}

#[test]
fn missing_ranks_are_named_to_rank_0_and_to_the_registered_nodes() {
    let (port, timeout) = (free_port(), Duration::from_millis(1500));
    let started = Instant::now();
    let nodes = [
        establish_on_thread(parma_launch(0, 5, port), 0, timeout),
        establish_on_thread(parma_launch(2, 5, port), 2, timeout),
    ];
    for h in nodes {
        let e = h.join().unwrap().unwrap_err();
        assert!(
            matches!(&e, StartupError::Missing { missing, registered: 2, .. } if missing.len() == 3),
            "{e}"
        );
        assert!(e.to_string().starts_with("ranks 1, 3-4 of 5 did not register within 1."), "{e}");
    }
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

#[test]
fn an_unreachable_rendezvous_is_an_error_naming_it_after_the_timeout() {
    let (port, timeout) = (free_port(), Duration::from_millis(600));
    let started = Instant::now();
    let e = join(&parma_launch(1, 2, port), &endpoint(1), DIGEST, &token(), timeout).unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(e, StartupError::Unreachable { .. }), "{e}");
    assert!(
        e.to_string().starts_with(&format!("the rendezvous at 127.0.0.1:{port} was not reachable within")),
        "{e}"
    );
    assert!(waited >= Duration::from_millis(500) && waited < Duration::from_secs(3), "{waited:?}");
}

#[test]
fn a_registered_node_gives_up_waiting_for_the_table_after_its_timeout() {
    let addr = RendezvousAddr { host: "127.0.0.1".into(), port: 0 };
    let rendezvous = Rendezvous::bind(&addr, 2, DIGEST, &token(), RendezvousOptions::default()).unwrap();
    let port = rendezvous.local_addr().unwrap().port();
    let server = thread::spawn(move || rendezvous.run(Duration::from_secs(4)));
    let started = Instant::now();
    let e = join(&parma_launch(1, 2, port), &endpoint(1), DIGEST, &token(), Duration::from_millis(500))
        .unwrap_err();
    // Its own timeout plus the grace for the rendezvous's error.
    assert!(matches!(e, StartupError::NoTable { .. }), "{e}");
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    let e = server.join().unwrap().unwrap_err();
    // The node gave up and closed: the rendezvous had dropped it by then or counts it.
    assert!(matches!(e, StartupError::Missing { .. }), "{e}");
}

//! Shutdown and drop join the driver threads; a killed peer ends waits with an error.
//! The file holds one test: it counts the process's driver threads, which tests running in
//! parallel would disturb.
#![forbid(unsafe_code)]

mod common;

use std::time::{Duration, Instant};

use common::{finalize_all, key_homed_at, start};
use parma_core::{Config, Key, Layout, NodeId, OpError};
use parma_runtime::{Error, Options};
use parma_transport_loopback::threaded::ThreadedOptions;

/// Whether the process has `n` driver threads within a moment (Linux, by thread name: a new
/// thread names itself once it runs, and a joined one leaves `/proc` a moment after). True
/// where threads cannot be counted.
fn drivers_become(n: usize) -> bool {
    let began = Instant::now();
    loop {
        match driver_threads() {
            None => return true,
            Some(m) if m == n => return true,
            Some(_) if began.elapsed() > Duration::from_secs(5) => return false,
            Some(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

fn driver_threads() -> Option<usize> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    let n = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("parma-driver-"))
        .count();
    Some(n)
}

fn cfg(nodes: u16) -> Config {
    Config::new(nodes, 2, Layout::uniform(100, 1).unwrap())
}

#[test]
fn no_thread_is_left_behind() {
    assert!(drivers_become(0));

    // Graceful: finalize every worker, then shut every node down.
    let c = start(&cfg(3), Options::default(), ThreadedOptions::default());
    assert!(drivers_become(3));
    finalize_all(c.workers);
    for n in c.nodes {
        n.shutdown().unwrap();
    }
    assert!(drivers_become(0));

    // Dropping the runtimes while workers still exist stops them too; the workers then get
    // `Closed`, also for local keys.
    let c = start(&cfg(2), Options::default(), ThreadedOptions::default());
    let mut workers = c.workers;
    let mut v = [0.0];
    workers[0].pull(&[Key(1)], &mut v).unwrap();
    drop(c.nodes);
    assert!(drivers_become(0));
    assert_eq!(workers[0].pull(&[Key(1)], &mut v), Err(OpError::Closed));
    assert_eq!(workers[1].push(&[Key(2)], &[1.0]).err(), Some(OpError::Closed));
    assert_eq!(workers[1].barrier(), Err(OpError::Closed));

    // A killed peer: waits on the others end with an error, not a hang.
    killed_peer_ends_waits();
    assert!(drivers_become(0));
}

fn killed_peer_ends_waits() {
    let mut cfg = cfg(3);
    cfg.request_timeout = parma_core::Duration::from_secs(2);
    let mut opts = Options::default();
    opts.wait_margin = Duration::from_secs(2);
    opts.drain_timeout = Duration::from_secs(5);
    let c = start(&cfg, opts, ThreadedOptions::default());
    let mut workers = c.workers;
    let far = key_homed_at(NodeId(2), &cfg, 0);
    let mut v = [0.0];
    workers[0].pull(&[far], &mut v).unwrap();

    // The workers of nodes 0 and 1 wait in a barrier for those of node 2, which dies.
    let began = Instant::now();
    let waiting: Vec<_> = workers.drain(..4).collect();
    let (results, waiting): (Vec<_>, Vec<_>) = std::thread::scope(|s| {
        let handles: Vec<_> = waiting.into_iter().map(|mut w| s.spawn(move || (w.barrier(), w))).collect();
        std::thread::sleep(Duration::from_millis(100));
        c.controller.kill(NodeId(2));
        handles.into_iter().map(|h| h.join().unwrap()).unzip()
    });
    for r in &results {
        assert!(matches!(r, Err(OpError::PeerFailed { node: NodeId(2) })), "{r:?}");
    }
    assert!(began.elapsed() < Duration::from_secs(2), "barrier failed late: {:?}", began.elapsed());

    // A request to the dead node after its failure is known ends too (at the latest with the
    // request timeout).
    let mut waiting = waiting;
    let pulled = waiting[0].pull(&[far], &mut v);
    assert!(matches!(pulled, Err(OpError::PeerFailed { .. } | OpError::Timeout)), "{pulled:?}");
    assert!(began.elapsed() < Duration::from_secs(10));
    drop(waiting);
    drop(workers);
    let mut nodes = c.nodes.into_iter();
    let (a, b, dead) = (nodes.next().unwrap(), nodes.next().unwrap(), nodes.next().unwrap());
    a.shutdown().unwrap();
    b.shutdown().unwrap();
    // The killed node's transport closed under its driver, and the error says so.
    let e = dead.shutdown().expect_err("a killed node cannot drain");
    assert!(matches!(e, Error::NotDrained(_, parma_runtime::Undrained::TransportClosed)), "{e:?}");
    assert!(e.to_string().ends_with("its transport closed"), "{e}");
}

//! `cargo bench -p parma-transport-zmq`: the ZeroMQ transport against plain `zeromq` and plain
//! tokio TCP doing the same work, every figure a ratio measured in the same run
//! (`docs/performance-transports.md`, "ZeroMQ transport").
//!
//! 1. **One-way throughput** (`oneway`): frames of 1 KiB and 64 KiB from node 0 to node 1
//!    through `ZmqTransport`, through a plain `zeromq` DEALER → ROUTER and through one plain
//!    tokio `TcpStream`, until the receiver has them all. In each round every contender runs
//!    once, the order rotating from round to round; the figures are the medians over the
//!    rounds of parma's rate over the other's in the same round, and of the other's CPU time
//!    per frame (every thread of both ends) over parma's.
//! 2. **Round trip of a one-key remote pull** (`pull`): a worker of one `NodeRuntime` pulling
//!    a key held by another, over `ZmqTransport`, synchronously, against a plain `zeromq`
//!    ping-pong of the same request and reply sizes, and the same pull with each node's driver
//!    on a thread of its own instead of its transport's I/O thread (`thread`: what
//!    `NodeRuntime::start` does with any transport). With both ends in one process, two more
//!    rows split the pull's time: the same pull over the threaded loopback (the runtime's
//!    threads, no network) and `ZmqTransport` alone (frames bounced by a thread, no runtime).
//!
//! Both run twice: with both ends in this process (threads), then with the receiving ends in a
//! second process (this executable run again as the peer, see `peer`).
//!
//! Environment: `PARMA_ZBENCH_PROCESSES=one|two` runs one of the two set-ups (default both);
//! `PARMA_ZBENCH_PARTS=oneway|pull` one part (default both); `PARMA_ZBENCH_ONLY=parma:1024`
//! runs only that contender at that size and `PARMA_ZBENCH_ROUNDTRIPS=transport` only those
//! round-trip rows, for a profiler; `PARMA_ZBENCH_WHO=parma,zeromq` races only those one-way
//! contenders against each other and `PARMA_ZBENCH_SIZES=65536` only that frame size (for an
//! A/B of two builds, with less time per run); `PARMA_ZBENCH_TAILS=1` adds the upper quantiles of the
//! round trips; `PARMA_ZBENCH_ROUNDS=60` runs that many rounds instead of 15 (a round's ratio
//! moves by 2× or more on these machines: many rounds pin the median down). Under each
//! one-way table, the quartiles of the per-round ratios of parma's rate to each other
//! contender's, and how many rounds reached 0.9. `cargo bench -- --test` (CI) runs every part
//! once with a few frames.
#![forbid(unsafe_code)]

mod common;
mod oneway;
mod peer;
mod pull;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use parma_core::NodeId;
use parma_transport_zmq::{local_cluster, Bound};

use common::{load_average, quantile, sorted, spread, zmq_options, BenchToken, Round, Side};
use oneway::{Contender, Imp};
use peer::{Peer, RemoteRx, ONEWAY_DIGEST};
use pull::{Holder, PingClient, Puller};

/// How much each part does.
struct Plan {
    /// Rounds of each table (every contender once per round).
    rounds: usize,
    /// Frame sizes of the one-way table, with the frames of one round.
    sizes: Vec<(usize, u64)>,
    /// Pulls (and pings) per round.
    pulls: usize,
}

impl Plan {
    fn new(quick: bool, rounds: Option<usize>) -> Plan {
        if quick {
            return Plan { rounds: 1, sizes: vec![(1 << 10, 200), (64 << 10, 20)], pulls: 20 };
        }
        Plan { rounds: rounds.unwrap_or(15), sizes: vec![(1 << 10, 50_000), (64 << 10, 4_000)], pulls: 2_000 }
    }
}

/// The contenders and the pull rig of one set-up: both ends here, or the receivers in the
/// peer process.
struct Setup {
    name: &'static str,
    contenders: Vec<Contender>,
    puller: Option<Puller>,
    /// The same pull with each node's driver on a thread of its own (one process only).
    thread_puller: Option<Puller>,
    /// Node 1 of the pulls, when in this process.
    holder: Option<Holder>,
    thread_holder: Option<Holder>,
    /// The echo server, when in this process.
    echo: Option<Side>,
    echo_ep: String,
    peer: Option<Rc<RefCell<Peer>>>,
    /// The benchmark token's key.
    key: u64,
}

impl Setup {
    fn in_process(key: u64) -> Setup {
        let token = Arc::new(BenchToken(key));
        let mut ts =
            local_cluster(2, &zmq_options(), ONEWAY_DIGEST, token).expect("two transports on 127.0.0.1");
        let t1 = ts.pop().expect("node 1");
        let t0 = ts.pop().expect("node 0");
        let mut threads =
            local_cluster(2, &zmq_options(), ONEWAY_DIGEST, Arc::new(BenchToken(key))).expect("two more");
        let t1t = threads.pop().expect("node 1");
        let t0t = threads.pop().expect("node 0");
        let (zrx, zep) = oneway::zeromq_rx();
        let (trx, tep) = oneway::tcp_rx();
        let contenders = vec![
            Contender {
                imp: Imp::Parma,
                tx: Box::new(oneway::parma_tx(t0, oneway::Host::Io)),
                rx: Box::new(oneway::parma_rx(t1, oneway::Host::Io)),
            },
            Contender {
                imp: Imp::Threads,
                tx: Box::new(oneway::parma_tx(t0t, oneway::Host::Thread)),
                rx: Box::new(oneway::parma_rx(t1t, oneway::Host::Thread)),
            },
            Contender { imp: Imp::Zeromq, tx: Box::new(oneway::zeromq_tx(zep)), rx: Box::new(zrx) },
            Contender { imp: Imp::Tcp, tx: Box::new(oneway::tcp_tx(tep)), rx: Box::new(trx) },
        ];
        let (puller, holder) = pull::in_process(key, false);
        let (thread_puller, thread_holder) = pull::in_process(key, true);
        let (echo, echo_ep) = pull::echo_server();
        Setup {
            name: "one process (threads)",
            contenders,
            puller: Some(puller),
            thread_puller: Some(thread_puller),
            holder: Some(holder),
            thread_holder: Some(thread_holder),
            echo: Some(echo),
            echo_ep,
            peer: None,
            key,
        }
    }

    fn two_processes(key: u64) -> Result<Setup, String> {
        let token = Arc::new(BenchToken(key));
        let (peer, eps) = Peer::spawn(key)?;
        let peer = Rc::new(RefCell::new(peer));
        let oneway0 = Bound::bind(zmq_options()).map_err(|e| e.to_string())?;
        let pull0 = Bound::bind(zmq_options()).map_err(|e| e.to_string())?;
        let (oneway_ep, pull_ep) = (oneway0.endpoint().to_string(), pull0.endpoint().to_string());
        peer.borrow_mut().say(&format!("peers {oneway_ep} {pull_ep}"))?;
        let t0 = oneway0
            .start(NodeId(0), vec![oneway_ep, eps.parma], ONEWAY_DIGEST, token.clone())
            .map_err(|e| e.to_string())?;
        let p0 = pull0
            .start(NodeId(0), vec![pull_ep, eps.pull], pull::digest(&pull::config()), token)
            .map_err(|e| e.to_string())?;
        let remote = |imp| Box::new(RemoteRx { peer: peer.clone(), imp });
        let contenders = vec![
            Contender {
                imp: Imp::Parma,
                tx: Box::new(oneway::parma_tx(t0, oneway::Host::Io)),
                rx: remote(Imp::Parma),
            },
            Contender {
                imp: Imp::Zeromq,
                tx: Box::new(oneway::zeromq_tx(eps.zeromq)),
                rx: remote(Imp::Zeromq),
            },
            Contender { imp: Imp::Tcp, tx: Box::new(oneway::tcp_tx(eps.tcp)), rx: remote(Imp::Tcp) },
        ];
        Ok(Setup {
            name: "two processes",
            contenders,
            puller: Some(Puller::start_zmq(p0)),
            // Not here: beside the puller above it would make this process run more node threads
            // than it has cores, and its waits would not spin (`Options::wait_spin`).
            thread_puller: None,
            holder: None,
            thread_holder: None,
            echo: None,
            echo_ep: eps.echo,
            peer: Some(peer),
            key,
        })
    }

    /// Stops everything: both pull nodes finalize together.
    fn finish(mut self) -> Result<(), String> {
        self.contenders.clear();
        let puller = self.puller.take().expect("the puller");
        match (self.holder.take(), self.thread_holder.take(), self.thread_puller.take(), &self.peer) {
            (Some(holder), Some(thread_holder), Some(thread_puller), _) => {
                pull::finish_both(puller, holder)?;
                pull::finish_both(thread_puller, thread_holder)?;
            }
            (None, None, None, Some(peer)) => {
                peer.borrow_mut().say("finish")?;
                puller.finish()?;
                let said = peer.borrow_mut().line()?;
                if said != "finished" {
                    return Err(format!("the peer said {said:?}"));
                }
            }
            _ => return Err("no node 1".into()),
        }
        self.echo.take();
        Ok(())
    }
}

/// The one-way table of one set-up.
fn oneway_table(setup: &mut Setup, plan: &Plan, only: Option<(Imp, usize)>) -> Result<(), String> {
    println!("\none-way throughput, {}: node 0 -> node 1, until the receiver has every frame", setup.name);
    println!(
        "  median over {} rounds (min-max); cpu: both ends' CPU time per frame (all threads);",
        plan.rounds
    );
    println!(
        "  parma / this: parma's rate over this one's, and this one's CPU per frame over parma's, per round"
    );
    println!(
        "{:>5} {:<7} {:>7} {:>24} {:>17} {:>18} {:>17} {:>17}",
        "size", "who", "frames", "frames/s", "MB/s", "cpu us/frame", "parma / this", "cpu this / parma"
    );
    let cs = &mut setup.contenders;
    let n = cs.len();
    for &(size, frames) in &plan.sizes {
        if only.is_some_and(|(_, s)| s != size) || !wanted("PARMA_ZBENCH_SIZES", &size.to_string()) {
            continue;
        }
        let round = Round { frames, size };
        let warm = Round { frames: (frames / 10).max(1), size };
        for c in cs.iter_mut() {
            if only.is_none_or(|(imp, _)| imp == c.imp) && wanted("PARMA_ZBENCH_WHO", c.imp.name()) {
                c.race(warm)?;
            }
        }
        let mut laps = vec![Vec::new(); n];
        for r in 0..plan.rounds {
            for k in 0..n {
                let i = (r + k) % n;
                if only.is_none_or(|(imp, _)| imp == cs[i].imp)
                    && wanted("PARMA_ZBENCH_WHO", cs[i].imp.name())
                {
                    laps[i].push(cs[i].race(round)?);
                }
            }
        }
        let parma = cs.iter().position(|c| c.imp == Imp::Parma).expect("parma runs");
        let mut quartiles = Vec::new();
        for (i, c) in cs.iter().enumerate() {
            if laps[i].is_empty() {
                continue;
            }
            let secs: Vec<f64> = laps[i].iter().map(|l| l.wall.as_secs_f64()).collect();
            let cpu: Vec<f64> = laps[i].iter().map(|l| l.cpu_ns as f64 / 1e3 / frames as f64).collect();
            let rates: Vec<f64> = secs.iter().map(|s| frames as f64 / s).collect();
            let mbs: Vec<f64> = rates.iter().map(|r| r * size as f64 / 1e6).collect();
            let (ratio, cpu_ratio) = if i == parma || laps[parma].len() != laps[i].len() {
                ("-".to_string(), "-".to_string())
            } else {
                let r: Vec<f64> = laps[i]
                    .iter()
                    .zip(&laps[parma])
                    .map(|(o, p)| o.wall.as_secs_f64() / p.wall.as_secs_f64())
                    .collect();
                let cr: Vec<f64> = laps[i]
                    .iter()
                    .zip(&laps[parma])
                    .map(|(o, p)| o.cpu_ns as f64 / p.cpu_ns.max(1) as f64)
                    .collect();
                quartiles.push((c.imp.name(), sorted(r.clone())));
                (format!("{}x", spread(&r, 2)), format!("{}x", spread(&cr, 2)))
            };
            println!(
                "{:>5} {:<7} {:>7} {:>24} {:>17} {:>18} {:>17} {:>17}",
                format!("{}K", size >> 10),
                c.imp.name(),
                frames,
                spread(&rates, 0),
                spread(&mbs, 0),
                spread(&cpu, 1),
                ratio,
                cpu_ratio
            );
        }
        for (who, r) in quartiles {
            let reached = r.iter().filter(|x| **x >= 0.9).count();
            println!(
                "{:>5}   parma / {who}, per round: quartiles {:.2} {:.2} {:.2}, {reached} of {} rounds at 0.9 or more",
                "",
                quantile(&r, 0.25),
                quantile(&r, 0.5),
                quantile(&r, 0.75),
                r.len()
            );
        }
    }
    Ok(())
}

/// `PARMA_ZBENCH_ROUNDS=<n>`, a positive number of rounds.
fn rounds() -> Result<Option<usize>, String> {
    match std::env::var("PARMA_ZBENCH_ROUNDS") {
        Err(_) => Ok(None),
        Ok(v) => match v.parse::<usize>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(format!("PARMA_ZBENCH_ROUNDS={v:?}: expected a positive number of rounds")),
        },
    }
}

/// Something that does synchronous round trips.
trait RoundTrip {
    /// `n` round trips one after another, each one's time in µs appended to `lat`; the
    /// round's time.
    fn round(&mut self, n: usize, lat: &mut Vec<f64>) -> Result<std::time::Duration, String>;
}

impl RoundTrip for Puller {
    fn round(&mut self, n: usize, lat: &mut Vec<f64>) -> Result<std::time::Duration, String> {
        Puller::round(self, n, lat)
    }
}

impl RoundTrip for pull::TransportPing {
    fn round(&mut self, n: usize, lat: &mut Vec<f64>) -> Result<std::time::Duration, String> {
        pull::TransportPing::round(self, n, lat)
    }
}

impl RoundTrip for PingClient {
    fn round(&mut self, n: usize, lat: &mut Vec<f64>) -> Result<std::time::Duration, String> {
        PingClient::round(self, n, lat)
    }
}

/// The pull table of one set-up, the ping-pong's sizes being `request` and `reply`. In the
/// one-process set-up, the same pulls over the threaded loopback (no network, no I/O thread)
/// show what the runtime's own threads cost a round trip.
fn pull_table(setup: &mut Setup, plan: &Plan, request: usize, reply: usize) -> Result<(), String> {
    let puller = setup.puller.as_mut().expect("the puller");
    let mut client = PingClient::connect(&setup.echo_ep, request, reply);
    let mut loopback = setup.holder.is_some().then(pull::loopback);
    let mut bare = setup.holder.is_some().then(|| pull::TransportPing::start(setup.key, request, reply));
    let mut who: Vec<(&str, &mut dyn RoundTrip)> = vec![("parma", puller), ("zeromq", &mut client)];
    if let Some(p) = setup.thread_puller.as_mut() {
        who.push(("thread", p));
    }
    if let Some((p, _)) = loopback.as_mut() {
        who.push(("loopback", p));
    }
    if let Some(b) = bare.as_mut() {
        who.push(("transport", b));
    }
    // `PARMA_ZBENCH_ROUNDTRIPS=transport` times only that row (for a profiler).
    who.retain(|(name, _)| wanted("PARMA_ZBENCH_ROUNDTRIPS", name));
    let n = who.len();
    for (_, w) in who.iter_mut() {
        w.round(plan.pulls / 10 + 1, &mut Vec::new())?;
    }
    let mut lat = vec![Vec::new(); n];
    let mut rates = vec![Vec::new(); n];
    let mut p50s = vec![Vec::new(); n];
    for r in 0..plan.rounds {
        for k in 0..n {
            let i = (r + k) % n;
            let mut l = Vec::new();
            let t = who[i].1.round(plan.pulls, &mut l)?;
            rates[i].push(plan.pulls as f64 / t.as_secs_f64());
            let l = sorted(l);
            p50s[i].push(quantile(&l, 0.5));
            lat[i].extend(l);
        }
    }
    println!(
        "\nround trip, {}: {} rounds x {} synchronous round trips, order rotating; latencies over all rounds",
        setup.name, plan.rounds, plan.pulls
    );
    println!(
        "  parma: a worker on node 0 pulls one key ({} f32) homed on node 1 (static partitioning)",
        pull::LEN
    );
    println!(
        "  zeromq: DEALER -> ROUTER -> DEALER, request {request} B, reply {reply} B (parma's frame sizes)"
    );
    if who.iter().any(|(name, _)| *name == "thread") {
        println!(
            "  thread: parma's pull with each node's driver on a thread of its own, not on the I/O thread"
        );
    }
    if who.iter().any(|(name, _)| *name == "loopback") {
        println!("  loopback: parma's pull over the threaded loopback transport (threads, no network)");
        println!("  transport: ZmqTransport alone, frames of those sizes bounced by a thread (no runtime)");
    }
    println!(
        "{:<9} {:>9} {:>9} {:>9} {:>22} {:>22}",
        "who", "p50 us", "p99 us", "mean us", "per second", "p50 parma / this"
    );
    for i in 0..n {
        let l = sorted(std::mem::take(&mut lat[i]));
        let ratio = if i == 0 || who[0].0 != "parma" || p50s[i].len() != p50s[0].len() {
            "-".to_string()
        } else {
            let r: Vec<f64> = p50s[0].iter().zip(&p50s[i]).map(|(p, o)| p / o).collect();
            format!("{}x", spread(&r, 2))
        };
        let mean = l.iter().sum::<f64>() / l.len().max(1) as f64;
        println!(
            "{:<9} {:>9.1} {:>9.1} {:>9.1} {:>22} {:>22}",
            who[i].0,
            quantile(&l, 0.5),
            quantile(&l, 0.99),
            mean,
            spread(&rates[i], 0),
            ratio
        );
        if std::env::var_os("PARMA_ZBENCH_TAILS").is_some() {
            let qs = [0.9, 0.95, 0.98, 0.99, 0.995, 0.999];
            let t: Vec<String> =
                qs.iter().map(|q| format!("p{}={:.0}", q * 100.0, quantile(&l, *q))).collect();
            println!("          tail: {}", t.join(" "));
        }
        lat[i] = l;
    }
    if n >= 2 {
        println!(
            "  p99 {} / {} over all rounds: {:.2}x",
            who[0].0,
            who[1].0,
            quantile(&lat[0], 0.99) / quantile(&lat[1], 0.99)
        );
    }
    drop(who);
    drop(bare);
    if let Some((p, h)) = loopback {
        pull::finish_both(p, h)?;
    }
    Ok(())
}

/// `PARMA_ZBENCH_ONLY=<contender>:<size>`.
fn only() -> Option<(Imp, usize)> {
    let v = std::env::var("PARMA_ZBENCH_ONLY").ok()?;
    let (imp, size) = v.split_once(':')?;
    Some((Imp::from_name(imp)?, size.parse().ok()?))
}

fn wanted(var: &str, name: &str) -> bool {
    std::env::var(var).map_or(true, |v| v.split(',').any(|w| w == name))
}

fn run() -> Result<(), String> {
    let quick = std::env::args().any(|a| a == "--test");
    let plan = Plan::new(quick, rounds()?);
    let only = only();
    let key: u64 =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(7, |d| d.as_nanos() as u64);
    println!("parma-transport-zmq bench: load average {} at the start", load_average());
    let pulls = only.is_none() && wanted("PARMA_ZBENCH_PARTS", "pull");
    let sizes = if pulls { Some(pull::frame_sizes(key, 100)?) } else { None };
    for (name, two) in [("one", false), ("two", true)] {
        if !wanted("PARMA_ZBENCH_PROCESSES", name) {
            continue;
        }
        let mut setup = if two { Setup::two_processes(key)? } else { Setup::in_process(key) };
        if wanted("PARMA_ZBENCH_PARTS", "oneway") {
            oneway_table(&mut setup, &plan, only)?;
        }
        if let Some((request, reply)) = sizes {
            pull_table(&mut setup, &plan, request, reply)?;
        }
        setup.finish()?;
    }
    println!("\nload average {} at the end", load_average());
    Ok(())
}

fn main() {
    let result = if peer::is_peer() { peer::serve() } else { run() };
    if let Err(e) = result {
        eprintln!("zbench: {e}");
        std::process::exit(1);
    }
}

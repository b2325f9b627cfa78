//! Two processes: the benchmark runs itself again as the peer (`PARMA_ZBENCH_PEER=1`), which
//! hosts every receiving side (and node 1 of the pulls, and the echo server); the parent keeps
//! the senders (node 0, the ping-pong client). They talk over the peer's stdin and stdout, one
//! line each way per command:
//!
//! - the peer starts with `ready <parma> <zeromq> <tcp> <pull> <echo>`: its endpoints;
//! - the parent answers `peers <parma> <pull>`: node 0's endpoints of the pairs;
//! - `rx <contender> <frames> <size>` → `done <bytes>` or `error <why>`: one round;
//! - `finish` → `finished` or `error <why>`: node 1's worker finalizes (with node 0's, which
//!   the parent finalizes meanwhile) and node 1 stops.

use std::cell::RefCell;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::rc::Rc;
use std::sync::{mpsc, Arc};

use parma_core::NodeId;
use parma_transport_zmq::Bound;

use crate::common::{zmq_options, BenchToken, Round, Side, ROUND_TIMEOUT};
use crate::oneway::{parma_rx, tcp_rx, zeromq_rx, Host, Imp, RxEnd};
use crate::pull::{config, digest, echo_server, Holder};

/// The environment variable that makes the benchmark the peer.
pub const PEER_ENV: &str = "PARMA_ZBENCH_PEER";
/// The environment variable that carries the benchmark token's key to the peer.
const KEY_ENV: &str = "PARMA_ZBENCH_KEY";
/// The digest of the throughput pair's handshake (no node runs over it).
pub const ONEWAY_DIGEST: u64 = 0xbe7c_0001;

/// The peer's endpoints.
pub struct Endpoints {
    pub parma: String,
    pub zeromq: String,
    pub tcp: String,
    pub pull: String,
    pub echo: String,
}

/// The peer process, as the parent sees it.
pub struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Peer {
    /// Starts the peer and reads its endpoints.
    pub fn spawn(key: u64) -> Result<(Peer, Endpoints), String> {
        let exe =
            std::env::current_exe().map_err(|e| format!("cannot find the benchmark's executable: {e}"))?;
        let mut child = Command::new(exe)
            .env(PEER_ENV, "1")
            .env(KEY_ENV, key.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start the peer process: {e}"))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut peer = Peer { child, stdin: Some(stdin), lines };
        let ready = peer.line()?;
        let eps: Vec<&str> = ready.strip_prefix("ready ").unwrap_or("").split(' ').collect();
        let [parma, zeromq, tcp, pull, echo] = eps[..] else {
            return Err(format!("the peer said {ready:?}"));
        };
        let eps = Endpoints {
            parma: parma.into(),
            zeromq: zeromq.into(),
            tcp: tcp.into(),
            pull: pull.into(),
            echo: echo.into(),
        };
        Ok((peer, eps))
    }

    pub fn say(&mut self, line: &str) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("the peer's input is closed")?;
        writeln!(stdin, "{line}").map_err(|e| format!("the peer is gone: {e}"))
    }

    /// The peer's next line.
    pub fn line(&mut self) -> Result<String, String> {
        self.lines.recv_timeout(ROUND_TIMEOUT).map_err(|e| format!("no word from the peer: {e}"))
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // Closing stdin ends the peer; it stops within its transports' linger.
        self.stdin.take();
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        eprintln!("the peer process did not stop within 10 s: killing it");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A receiving side in the peer process.
pub struct RemoteRx {
    pub peer: Rc<RefCell<Peer>>,
    pub imp: Imp,
}

impl RxEnd for RemoteRx {
    fn start(&mut self, r: Round) {
        let line = format!("rx {} {} {}", self.imp.name(), r.frames, r.size);
        if let Err(e) = self.peer.borrow_mut().say(&line) {
            eprintln!("{e}");
        }
    }
    fn pid(&self) -> Option<u32> {
        Some(self.peer.borrow().child.id())
    }
    fn wait(&mut self) -> Result<u64, String> {
        let line = self.peer.borrow_mut().line()?;
        match line.split_once(' ') {
            Some(("done", bytes)) => bytes.parse().map_err(|_| format!("the peer said {line:?}")),
            _ => Err(format!("the peer said {line:?}")),
        }
    }
}

/// Whether this process is the peer.
pub fn is_peer() -> bool {
    std::env::var_os(PEER_ENV).is_some()
}

/// The peer's life: sets up every receiving side, then serves the parent's commands until
/// its stdin closes.
pub fn serve() -> Result<(), String> {
    let key: u64 = std::env::var(KEY_ENV).ok().and_then(|k| k.parse().ok()).ok_or("no token key")?;
    let token = Arc::new(BenchToken(key));
    let oneway = Bound::bind(zmq_options()).map_err(|e| e.to_string())?;
    let pull = Bound::bind(zmq_options()).map_err(|e| e.to_string())?;
    let (zeromq, zeromq_ep) = zeromq_rx();
    let (tcp, tcp_ep) = tcp_rx();
    let (echo, echo_ep) = echo_server();
    let (oneway_ep, pull_ep) = (oneway.endpoint().to_string(), pull.endpoint().to_string());
    println!("ready {oneway_ep} {zeromq_ep} {tcp_ep} {pull_ep} {echo_ep}");

    let mut input = std::io::stdin().lock().lines();
    let mut next = || input.next().and_then(Result::ok);
    let peers = next().ok_or("no peers line")?;
    let eps: Vec<&str> = peers.strip_prefix("peers ").unwrap_or("").split(' ').collect();
    let [parma0, pull0] = eps[..] else {
        return Err(format!("the parent said {peers:?}"));
    };
    let t1 = oneway
        .start(NodeId(1), vec![parma0.into(), oneway_ep], ONEWAY_DIGEST, token.clone())
        .map_err(|e| e.to_string())?;
    let mut sides: Vec<(Imp, Side)> =
        vec![(Imp::Parma, parma_rx(t1, Host::Io)), (Imp::Zeromq, zeromq), (Imp::Tcp, tcp)];
    let p1 = pull
        .start(NodeId(1), vec![pull0.into(), pull_ep], digest(&config()), token)
        .map_err(|e| e.to_string())?;
    let mut holder = Some(Holder::start_zmq(p1));

    while let Some(line) = next() {
        let words: Vec<&str> = line.split(' ').collect();
        let reply = match words[..] {
            ["rx", imp, frames, size] => rx_round(&mut sides, imp, frames, size),
            ["finish"] => match holder.take().map(Holder::finish) {
                Some(Ok(())) => "finished".to_string(),
                Some(Err(e)) => format!("error {e}"),
                None => "error finished already".to_string(),
            },
            _ => format!("error unknown command {line:?}"),
        };
        println!("{reply}");
    }
    drop(echo);
    Ok(())
}

fn rx_round(sides: &mut [(Imp, Side)], imp: &str, frames: &str, size: &str) -> String {
    let (Some(imp), Ok(frames), Ok(size)) = (Imp::from_name(imp), frames.parse(), size.parse()) else {
        return "error bad rx command".into();
    };
    let Some((_, side)) = sides.iter_mut().find(|(i, _)| *i == imp) else {
        return "error no such side".into();
    };
    side.start(Round { frames, size });
    match side.wait() {
        Ok(bytes) => format!("done {bytes}"),
        Err(e) => format!("error {e}"),
    }
}

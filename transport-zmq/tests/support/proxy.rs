//! A TCP proxy between two nodes, on plain threads: it forwards bytes both ways, and on
//! command cuts every connection it carries (reset, bytes in flight lost) or stalls them
//! (nothing forwarded, connections kept open, as when a process is stopped).

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often blocked threads look at the proxy's flags.
const TICK: Duration = Duration::from_millis(10);

pub struct Proxy {
    addr: SocketAddr,
    inner: Arc<Inner>,
    acceptor: Option<JoinHandle<()>>,
}

struct Inner {
    target: SocketAddr,
    /// Both streams of every connection being forwarded (clones, for cutting).
    conns: Mutex<Vec<(TcpStream, TcpStream)>>,
    pumps: Mutex<Vec<JoinHandle<()>>>,
    stalled: AtomicBool,
    stop: AtomicBool,
    accepted: AtomicU64,
    cut: AtomicU64,
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and forwards every connection to `target`.
    pub fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a port for the proxy");
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let addr = listener.local_addr().expect("the proxy's address");
        let inner = Arc::new(Inner {
            target,
            conns: Mutex::new(Vec::new()),
            pumps: Mutex::new(Vec::new()),
            stalled: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
            cut: AtomicU64::new(0),
        });
        let i = inner.clone();
        let acceptor = std::thread::spawn(move || accept_loop(&listener, &i));
        Proxy { addr, inner, acceptor: Some(acceptor) }
    }

    /// Where to connect instead of the target: `tcp://127.0.0.1:port`.
    pub fn endpoint(&self) -> String {
        format!("tcp://{}", self.addr)
    }

    /// Resets every connection now: both sockets close with SO_LINGER 0, whatever was in
    /// flight is lost. Returns how many connections were cut.
    pub fn cut(&self) -> usize {
        let conns = std::mem::take(&mut *self.inner.conns.lock().unwrap());
        for (a, b) in &conns {
            for s in [a, b] {
                let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        self.inner.cut.fetch_add(conns.len() as u64, Ordering::Relaxed);
        conns.len()
    }

    /// Stops (`true`) or resumes (`false`) forwarding, in both directions, on every
    /// connection, those opened meanwhile included. Connections stay open.
    pub fn stall(&self, on: bool) {
        self.inner.stalled.store(on, Ordering::SeqCst);
    }

    /// Connections being forwarded now.
    pub fn open_connections(&self) -> usize {
        self.inner.conns.lock().unwrap().len()
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.inner.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        self.cut();
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        let pumps = std::mem::take(&mut *self.inner.pumps.lock().unwrap());
        for p in pumps {
            let _ = p.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, inner: &Arc<Inner>) {
    while !inner.stop.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(_) => continue,
        };
        inner.accepted.fetch_add(1, Ordering::Relaxed);
        // A target that is gone (a killed node) closes the client's connection at once.
        let Ok(server) = TcpStream::connect_timeout(&inner.target, Duration::from_secs(1)) else { continue };
        let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else { continue };
        let (Ok(c3), Ok(s3)) = (client.try_clone(), server.try_clone()) else { continue };
        for s in [&client, &server] {
            let _ = s.set_nodelay(true);
            let _ = s.set_read_timeout(Some(TICK));
            // A node always reads; a write that blocks this long means the proxy is stopping.
            let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
        }
        inner.conns.lock().unwrap().push((c3, s3));
        let (i1, i2) = (inner.clone(), inner.clone());
        let mut pumps = inner.pumps.lock().unwrap();
        pumps.retain(|p| !p.is_finished());
        pumps.push(std::thread::spawn(move || pump(client, s2, &i1)));
        pumps.push(std::thread::spawn(move || pump(server, c2, &i2)));
    }
}

/// Forwards `from` to `to` until either closes or the proxy stops; then closes both.
fn pump(mut from: TcpStream, mut to: TcpStream, inner: &Inner) {
    let mut buf = vec![0u8; 64 << 10];
    while !inner.stop.load(Ordering::SeqCst) {
        if inner.stalled.load(Ordering::SeqCst) {
            std::thread::sleep(TICK);
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

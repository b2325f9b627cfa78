//! The transport test kit: the [`Transport`] contract checked on any transport with one call.
//!
//! Someone who plugs in a transport implements [`KitCluster`] (how to make `n` connected
//! transports, and how to let time pass) and calls [`run`]; every transport in this repository
//! runs it too (`conformance/tests/transport_kit.rs`). The checks use only the trait, bound
//! every wait by a number of [`KitCluster::pause`] calls, and fail with a message instead of
//! hanging.
//!
//! What the contract says, and the kit checks:
//!
//! | check | the contract |
//! | --- | --- |
//! | `fifo` | frames between each ordered pair (a node to itself included) arrive complete and in the order sent |
//! | `empty_frames` | a frame of zero bytes is a frame |
//! | `refusals` | `TooLarge` above `frame_len_max`, `UnknownPeer` for a node outside the cluster; on any `Err` the fill closure is not called |
//! | `wake_on_arrival` | a frame's arrival wakes the receiver's registered waker |
//! | `back_pressure` | a peer that does not read makes `try_send` answer `WouldBlock` within bounded memory; once it reads, the sender's waker fires and nothing was lost |
//! | `close` | after `close`, sends answer `Closed` and receiving `Err(Closed)`; every peer sees `PeerFailed` for the closed node exactly once, and no frame from it after that |
//! | `stress` | four nodes exchanging many frames of random sizes lose, double and reorder none |

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};

use parma_core::transport::{RecvError, SendError, Transport, TransportEvent};
use parma_core::NodeId;

use crate::rng::Rng;

/// How to make the transports under test.
pub trait KitCluster {
    /// The transport.
    type T: Transport;
    /// `n` connected transports of one fresh cluster, node ids `0..n`, in id order; their
    /// `frame_len_max` is at least 64 KiB.
    fn make(&mut self, n: u16) -> Vec<Self::T>;
    /// Lets a little time pass: sleep a millisecond on a real medium, advance virtual time in
    /// a simulation. Every wait of the kit is a bounded number of these.
    fn pause(&mut self);
}

/// Most pauses a check waits for something that must happen.
const PAUSES_MAX: usize = 10_000;

/// The outcome of each check, by name.
#[derive(Debug)]
pub struct KitReport {
    pub results: Vec<(&'static str, Result<(), String>)>,
}

impl KitReport {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.results.iter().all(|(_, r)| r.is_ok())
    }
}

impl std::fmt::Display for KitReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (name, r) in &self.results {
            match r {
                Ok(()) => writeln!(f, "{name}: pass")?,
                Err(e) => writeln!(f, "{name}: FAIL: {e}")?,
            }
        }
        Ok(())
    }
}

/// Runs every check on transports made by `cluster`.
pub fn run<C: KitCluster>(cluster: &mut C) -> KitReport {
    type Check<C> = fn(&mut C) -> Result<(), String>;
    let checks: [(&'static str, Check<C>); 7] = [
        ("fifo", fifo),
        ("empty_frames", empty_frames),
        ("refusals", refusals),
        ("wake_on_arrival", wake_on_arrival),
        ("back_pressure", back_pressure),
        ("close", close),
        ("stress", stress),
    ];
    KitReport { results: checks.iter().map(|(name, check)| (*name, check(cluster))).collect() }
}

/// A waker that counts its wakes.
#[derive(Default)]
struct Counter(AtomicUsize);

impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counter() -> (Arc<Counter>, Waker) {
    let c = Arc::new(Counter::default());
    (Arc::clone(&c), Waker::from(c))
}

fn send<T: Transport>(t: &mut T, to: u16, bytes: &[u8]) -> Result<(), SendError> {
    t.try_send(NodeId(to), bytes.len(), &mut |buf| buf.copy_from_slice(bytes))
}

/// Every frame waiting at `t`, with its sender.
fn recv<T: Transport>(t: &mut T) -> Result<Vec<(u16, Vec<u8>)>, String> {
    let mut got = Vec::new();
    t.poll_recv(usize::MAX, &mut |from, f| got.push((from.0, f.to_vec())))
        .map_err(|e| format!("poll_recv failed: {e:?}"))?;
    Ok(got)
}

/// A frame that says who sent it to whom, its number, and a checksum over a body of `len`.
fn frame(from: u16, to: u16, seq: u64, len: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(20 + len);
    f.extend_from_slice(&from.to_le_bytes());
    f.extend_from_slice(&to.to_le_bytes());
    f.extend_from_slice(&seq.to_le_bytes());
    let body: Vec<u8> = (0..len).map(|i| (seq as usize * 31 + i * 7) as u8).collect();
    let sum = body.iter().fold(0u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
    f.extend_from_slice(&sum.to_le_bytes());
    f.extend_from_slice(&body);
    f
}

/// Checks a received frame: intact, from `from` to `to`; returns its number.
fn check_frame(from: u16, to: u16, f: &[u8]) -> Result<u64, String> {
    if f.len() < 20 {
        return Err(format!("a frame of {} bytes from {from} is not one the kit sent", f.len()));
    }
    let (a, b) = (u16::from_le_bytes([f[0], f[1]]), u16::from_le_bytes([f[2], f[3]]));
    let seq = u64::from_le_bytes(f[4..12].try_into().unwrap_or_default());
    if (a, b) != (from, to) {
        return Err(format!("frame {seq} says {a}→{b}, arrived as {from}→{to}"));
    }
    if frame(from, to, seq, f.len() - 20) != f {
        return Err(format!("frame {seq} {from}→{to} arrived damaged"));
    }
    Ok(seq)
}

/// Receives at every node until `done` says enough arrived, checking order per pair.
fn pump<C: KitCluster>(
    c: &mut C,
    nodes: &mut [C::T],
    expect: &mut [Vec<u64>],
    mut done: impl FnMut(&[Vec<u64>]) -> bool,
) -> Result<(), String> {
    let n = nodes.len();
    for _ in 0..PAUSES_MAX {
        for (to, t) in nodes.iter_mut().enumerate() {
            for (from, f) in recv(t)? {
                let seq = check_frame(from, to as u16, &f)?;
                let next = &mut expect[usize::from(from) * n + to];
                if next.first() != Some(&seq) {
                    return Err(format!("{from}→{to}: frame {seq} arrived, expected {:?}", next.first()));
                }
                next.remove(0);
            }
        }
        if done(expect) {
            return Ok(());
        }
        c.pause();
    }
    Err("frames did not arrive within the kit's wait".into())
}

fn fifo<C: KitCluster>(c: &mut C) -> Result<(), String> {
    let mut nodes = c.make(3);
    let n = nodes.len() as u16;
    let mut expect = vec![Vec::new(); 9];
    for seq in 0..100u64 {
        for from in 0..n {
            for to in 0..n {
                let f = frame(from, to, seq, (seq as usize * 97) % 2048);
                let t = &mut nodes[usize::from(from)];
                for _ in 0..PAUSES_MAX {
                    match send(t, to, &f) {
                        Ok(()) => break,
                        Err(SendError::WouldBlock) => c.pause(),
                        Err(e) => return Err(format!("send {from}→{to}: {e:?}")),
                    }
                }
                expect[usize::from(from * n + to)].push(seq);
            }
        }
    }
    pump(c, &mut nodes, &mut expect, |e| e.iter().all(Vec::is_empty))
}

fn empty_frames<C: KitCluster>(c: &mut C) -> Result<(), String> {
    let mut nodes = c.make(2);
    send(&mut nodes[1], 0, &[]).map_err(|e| format!("{e:?}"))?;
    for _ in 0..PAUSES_MAX {
        let got = recv(&mut nodes[0])?;
        if !got.is_empty() {
            return if got == vec![(1, Vec::new())] { Ok(()) } else { Err(format!("got {got:?}")) };
        }
        c.pause();
    }
    Err("the empty frame never arrived".into())
}

fn refusals<C: KitCluster>(c: &mut C) -> Result<(), String> {
    let mut nodes = c.make(2);
    let t = &mut nodes[0];
    let max = t.frame_len_max();
    let r = t.try_send(NodeId(1), max + 1, &mut |_| panic!("fill called on a refused send"));
    if r != Err(SendError::TooLarge) {
        return Err(format!("a frame of frame_len_max + 1 bytes: {r:?}, expected TooLarge"));
    }
    let r = t.try_send(NodeId(2), 1, &mut |_| panic!("fill called on a refused send"));
    if r != Err(SendError::UnknownPeer) {
        return Err(format!("a frame to node 2 of 2: {r:?}, expected UnknownPeer"));
    }
    Ok(())
}

fn wake_on_arrival<C: KitCluster>(c: &mut C) -> Result<(), String> {
    let mut nodes = c.make(2);
    let (count, waker) = counter();
    nodes[1].register_waker(&waker);
    recv(&mut nodes[1])?;
    let before = count.0.load(Ordering::SeqCst);
    send(&mut nodes[0], 1, b"wake up").map_err(|e| format!("{e:?}"))?;
    for _ in 0..PAUSES_MAX {
        if count.0.load(Ordering::SeqCst) > before {
            let got = recv(&mut nodes[1])?;
            return if got.is_empty() { Err("woken, but nothing to receive".into()) } else { Ok(()) };
        }
        c.pause();
    }
    Err("the arrival of a frame never woke the receiver".into())
}

fn back_pressure<C: KitCluster>(c: &mut C) -> Result<(), String> {
    let mut nodes = c.make(2);
    let (count, waker) = counter();
    nodes[0].register_waker(&waker);
    // Node 1 does not read: node 0 must be held back before 1 GiB is queued.
    let len = 16 << 10;
    let mut sent = 0u64;
    let mut blocked = false;
    for _ in 0..(1u64 << 30) / len as u64 {
        match send(&mut nodes[0], 1, &frame(0, 1, sent, len)) {
            Ok(()) => sent += 1,
            Err(SendError::WouldBlock) => {
                blocked = true;
                break;
            }
            Err(e) => return Err(format!("send: {e:?}")),
        }
        if sent % 64 == 0 {
            c.pause();
        }
    }
    if !blocked {
        return Err(format!("{sent} frames of {len} bytes to a peer that does not read, and no WouldBlock"));
    }
    let woken = count.0.load(Ordering::SeqCst);
    let mut expect = vec![Vec::new(), (0..sent).collect::<Vec<u64>>(), Vec::new(), Vec::new()];
    // Node 1 reads everything; node 0 is woken and can send again.
    pump(c, &mut nodes, &mut expect, |e| e[1].is_empty())?;
    for _ in 0..PAUSES_MAX {
        if count.0.load(Ordering::SeqCst) > woken {
            break;
        }
        c.pause();
    }
    if count.0.load(Ordering::SeqCst) == woken {
        return Err("room freed, but the blocked sender was never woken".into());
    }
    send(&mut nodes[0], 1, &frame(0, 1, sent, 8)).map_err(|e| format!("send after the drain: {e:?}"))?;
    expect[1].push(sent);
    pump(c, &mut nodes, &mut expect, |e| e[1].is_empty())
}

fn close<C: KitCluster>(c: &mut C) -> Result<(), String> {
    let mut nodes = c.make(3);
    send(&mut nodes[0], 1, &frame(0, 1, 0, 10)).map_err(|e| format!("{e:?}"))?;
    nodes[0].close();
    if send(&mut nodes[0], 1, b"x") != Err(SendError::Closed) {
        return Err("a closed transport accepted a frame".into());
    }
    if nodes[0].poll_recv(10, &mut |_, _| ()) != Err(RecvError::Closed) {
        return Err("a closed transport did not answer poll_recv with Closed".into());
    }
    let mut failed = [0usize; 3];
    for _ in 0..PAUSES_MAX {
        for i in 1..3 {
            let after = failed[i] > 0;
            for (from, f) in recv(&mut nodes[i])? {
                if from == 0 && after {
                    return Err(format!("node {i} got a frame from node 0 after PeerFailed"));
                }
                check_frame(from, i as u16, &f)?;
            }
            while let Some(ev) = nodes[i].poll_event() {
                match ev {
                    TransportEvent::PeerFailed(NodeId(0)) => failed[i] += 1,
                    other => return Err(format!("node {i}: unexpected {other:?}")),
                }
            }
        }
        if failed[1] > 0 && failed[2] > 0 {
            // A few more pauses: a second report would show now.
            for _ in 0..10 {
                c.pause();
                for i in 1..3 {
                    while nodes[i].poll_event().is_some() {
                        failed[i] += 1;
                    }
                }
            }
            return if failed[1..] == [1, 1] {
                Ok(())
            } else {
                Err(format!("PeerFailed reported {failed:?} times"))
            };
        }
        c.pause();
    }
    Err(format!("the peers never saw node 0 fail: {failed:?}"))
}

fn stress<C: KitCluster>(c: &mut C) -> Result<(), String> {
    let mut nodes = c.make(4);
    let n = nodes.len();
    let mut rng = Rng::new(0x5eed);
    let mut next = vec![0u64; n * n];
    let mut expect = vec![Vec::new(); n * n];
    let mut queue: VecDeque<(usize, usize)> = (0..20_000)
        .map(|_| (rng.range(0, n as u64 - 1) as usize, rng.range(0, n as u64 - 1) as usize))
        .collect();
    for _ in 0..PAUSES_MAX * 10 {
        for _ in 0..64 {
            let Some(&(from, to)) = queue.front() else { break };
            let seq = next[from * n + to];
            let f = frame(from as u16, to as u16, seq, rng.range(0, 4095) as usize);
            match send(&mut nodes[from], to as u16, &f) {
                Ok(()) => {
                    queue.pop_front();
                    next[from * n + to] += 1;
                    expect[from * n + to].push(seq);
                }
                Err(SendError::WouldBlock) => break,
                Err(e) => return Err(format!("send {from}→{to}: {e:?}")),
            }
        }
        let all_sent = queue.is_empty();
        pump(c, &mut nodes, &mut expect, |_| true)?;
        if all_sent && expect.iter().all(Vec::is_empty) {
            return Ok(());
        }
        c.pause();
    }
    Err(format!("{} frames never sent or arrived", queue.len() + expect.iter().map(Vec::len).sum::<usize>()))
}

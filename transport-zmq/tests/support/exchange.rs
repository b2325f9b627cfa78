//! Every node sends numbered frames to every other node and checks what it receives: from
//! each sender, frames 0, 1, 2, ... with the pattern their number gives, nothing lost,
//! doubled, reordered or damaged. One thread per node, no runtime.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parma_core::transport::{SendError, Transport, TransportEvent};
use parma_core::NodeId;
use parma_runtime::host::unpark_waker;

/// What one node saw.
#[derive(Debug, Default)]
pub struct NodeReport {
    /// Frames sent to each peer and received from each peer.
    pub sent: Vec<u64>,
    pub received: Vec<u64>,
    /// Frames out of sequence or damaged, and send errors: each a line saying what.
    pub errors: Vec<String>,
    /// Peers reported failed, and when.
    pub failed: Vec<(NodeId, Instant)>,
    /// When the node had sent and received everything.
    pub done_at: Option<Instant>,
}

/// How a run of [`exchange`] goes.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Frames each node sends to each other node; `None`: until the test's closure returns.
    pub frames_per_pair: Option<u64>,
    /// Bytes of each frame (at least 10).
    pub frame_len: usize,
    /// The run ends at this time even if frames are missing.
    pub limit: Duration,
    /// Frames a node sends to one peer before it looks at what it received (bursts).
    pub burst: u64,
    /// Pause after each round of sends (spreads the run over time), if any.
    pub pace: Option<Duration>,
}

/// What the node threads share: how many frames each sends to each (`u64::MAX` while not
/// yet known), and whether the test's closure returned.
struct Board {
    n: usize,
    quota: Vec<AtomicU64>,
    stop: AtomicBool,
    /// A node saw an error or a failed peer: the others stop waiting for it.
    abort: AtomicBool,
}

impl Board {
    fn quota(&self, from: usize, to: usize) -> u64 {
        self.quota[from * self.n + to].load(Ordering::SeqCst)
    }
}

/// Runs the exchange on `transports` (one thread each) while `during` runs on this thread;
/// returns each node's report. `during` gets a flag that is set once every node finished.
/// With an open-ended plan, the nodes stop sending once `during` returned, and finish when
/// they received everything sent.
pub fn exchange<T: Transport + Send>(
    transports: &mut [T],
    plan: Plan,
    during: impl FnOnce(&AtomicBool),
) -> Vec<NodeReport> {
    assert!(plan.frame_len >= 10);
    let n = transports.len();
    let quota = plan.frames_per_pair.unwrap_or(u64::MAX);
    let board = Board {
        n,
        quota: (0..n * n).map(|_| AtomicU64::new(quota)).collect(),
        stop: AtomicBool::new(false),
        abort: AtomicBool::new(false),
    };
    let finished = AtomicBool::new(false);
    let running = AtomicUsize::new(n);
    std::thread::scope(|s| {
        let handles: Vec<_> = transports
            .iter_mut()
            .map(|t| {
                let (finished, running, board) = (&finished, &running, &board);
                s.spawn(move || {
                    let r = run_node(t, board, plan);
                    if running.fetch_sub(1, Ordering::SeqCst) == 1 {
                        finished.store(true, Ordering::SeqCst);
                    }
                    r
                })
            })
            .collect();
        during(&finished);
        if plan.frames_per_pair.is_none() {
            board.stop.store(true, Ordering::SeqCst);
        }
        handles.into_iter().map(|h| h.join().expect("a node thread")).collect()
    })
}

fn frame_byte(from: usize, seq: u64, i: usize) -> u8 {
    (seq as u8).wrapping_mul(31).wrapping_add(from as u8).wrapping_add(i as u8)
}

fn run_node<T: Transport>(t: &mut T, board: &Board, plan: Plan) -> NodeReport {
    let n = board.n;
    let me = usize::from(t.local_id().0);
    t.register_waker(&unpark_waker(std::thread::current()));
    let mut r = NodeReport { sent: vec![0; n], received: vec![0; n], ..NodeReport::default() };
    let mut dead = vec![false; n];
    let mut fixed = false;
    let end = Instant::now() + plan.limit;
    while Instant::now() < end {
        if !r.errors.is_empty() || !r.failed.is_empty() {
            board.abort.store(true, Ordering::SeqCst);
        }
        if board.abort.load(Ordering::SeqCst) {
            break;
        }
        if !fixed && board.stop.load(Ordering::SeqCst) {
            // The closure returned: what was sent so far is all there is.
            for p in 0..n {
                board.quota[me * n + p].fetch_min(r.sent[p], Ordering::SeqCst);
            }
            fixed = true;
        }
        let mut progress = false;
        let live: Vec<usize> = (0..n).filter(|&p| p != me && !dead[p]).collect();
        for p in live {
            let mut burst = 0;
            while r.sent[p] < board.quota(me, p) && burst < plan.burst {
                let seq = r.sent[p];
                let fill = &mut |b: &mut [u8]| {
                    b[..2].copy_from_slice(&(me as u16).to_le_bytes());
                    b[2..10].copy_from_slice(&seq.to_le_bytes());
                    for (i, x) in b[10..].iter_mut().enumerate() {
                        *x = frame_byte(me, seq, i);
                    }
                };
                match t.try_send(NodeId(p as u16), plan.frame_len, fill) {
                    Ok(()) => {
                        r.sent[p] += 1;
                        burst += 1;
                        progress = true;
                    }
                    Err(SendError::WouldBlock) => break,
                    Err(e) => {
                        r.errors.push(format!("node {me}: sending frame {seq} to {p}: {e:?}"));
                        dead[p] = true;
                        break;
                    }
                }
            }
        }
        let received = &mut r.received;
        let errors = &mut r.errors;
        let got = t.poll_recv(1024, &mut |from, f| check(me, from, f, received, errors));
        match got {
            Ok(k) => progress |= k > 0,
            Err(e) => {
                r.errors.push(format!("node {me}: poll_recv: {e:?}"));
                break;
            }
        }
        while let Some(ev) = t.poll_event() {
            if let TransportEvent::PeerFailed(p) = ev {
                r.failed.push((p, Instant::now()));
                dead[usize::from(p.0)] = true;
            }
        }
        let complete = (0..n)
            .filter(|&p| p != me)
            .all(|p| r.sent[p] == board.quota(me, p) && r.received[p] == board.quota(p, me));
        if complete {
            r.done_at = Some(Instant::now());
            break;
        }
        if let Some(d) = plan.pace {
            std::thread::sleep(d);
        } else if !progress {
            std::thread::park_timeout(Duration::from_millis(5));
        }
    }
    r
}

fn check(me: usize, from: NodeId, f: &[u8], received: &mut [u64], errors: &mut Vec<String>) {
    let p = usize::from(from.0);
    let want = received[p];
    let ok_len = f.len() >= 10;
    let sender = ok_len.then(|| u16::from_le_bytes([f[0], f[1]]));
    let seq = ok_len.then(|| u64::from_le_bytes(f[2..10].try_into().expect("8 bytes")));
    let intact = ok_len && f[10..].iter().enumerate().all(|(i, x)| *x == frame_byte(p, want, i));
    if sender != Some(from.0) || seq != Some(want) || !intact {
        errors.push(format!(
            "node {me}: from {p} expected frame {want}, got {} bytes claiming sender {sender:?} frame {seq:?}, intact {intact}",
            f.len()
        ));
    }
    received[p] += 1;
}

//! The progress thread: completions, credits, heartbeats, silence, goodbyes.
//!
//! One thread per transport (`parma-rdma-<id>`) runs [`step`] under the lock, then waits:
//!
//! - [`Completion::Channel`]: when nothing waits for credits, it arms the completion queue,
//!   looks once more (a completion may have come before the arming), and sleeps in `poll(2)`
//!   on the completion channel until a completion or the next timer; when sends wait for
//!   credits (which come by RDMA WRITE into the mailbox, without a completion here) it polls
//!   every `credit_poll`.
//! - [`Completion::Poll`]: it spins (yielding) for a while after the last work, then sleeps
//!   in growing steps up to `poll_sleep_max`.
//!
//! The crate docs say which is the default and why.

use std::os::raw::{c_int, c_short};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::state::{split_wr_id, Link, State, KIND_CHUNK, KIND_RECV, KIND_SEND, KIND_WRITE, MAILBOX_LEN};
use crate::{lock, Completion, Shared};

/// What a step saw.
pub(crate) struct Stepped {
    /// Completions or arrivals were handled.
    pub worked: bool,
    /// Sends wait for credits.
    pub waiting: bool,
}

/// Takes completions, reads the mailboxes, posts what credits allow, sends heartbeats and
/// credit returns, and fails silent peers.
pub(crate) fn step(st: &mut State, now: Instant) -> Stepped {
    let worked = poll_cq(st);
    let n = st.peers.len();
    let mut waiting = false;
    for p in 0..n {
        if p == st.me || st.peers[p].link == Link::Failed {
            continue;
        }
        let base = p * MAILBOX_LEN;
        let beat = st.mailbox.read_u64(base + 8);
        if beat != st.peers[p].seen_beat || st.peers[p].heard {
            st.peers[p].seen_beat = beat;
            st.peers[p].heard = false;
            st.peers[p].last_heard = now;
        }
        let bye = st.mailbox.read_u64(base + 16);
        if bye != 0 && st.peers[p].link == Link::Up {
            // Every message the peer sent before its goodbye completed before the goodbye
            // was written (one queue pair, in order): take those completions first.
            poll_cq(st);
            let named = bye.checked_sub(2).and_then(|n| usize::try_from(n).ok());
            st.leaving(p, named);
            continue;
        }
        if now.saturating_duration_since(st.peers[p].last_heard) > st.opts.peer_timeout {
            let t = st.opts.peer_timeout;
            st.fail(p, format!("silent for more than {t:?}"));
            continue;
        }
        st.pump(p);
        waiting |= st.peers[p].has_queued();
        if st.peers[p].write_wanted && !st.closed {
            st.write_mailbox(p, false);
        }
    }
    st.heartbeat(now);
    Stepped { worked, waiting }
}

/// Calls of [`SparseClock::now`] between two reads of the clock.
const CLOCK_CALLS: u32 = 16;

/// The time for the transport's timers, read afresh once per `CLOCK_CALLS` calls and on the
/// first call after [`SparseClock::stale`]: a busy loop turns in microseconds and the timers
/// it serves count in hundreds of milliseconds, while a clock read can cost more than the
/// turn (a trap to an emulated timer in a VM: `read_hpet` was a quarter of a 64 KiB run's
/// samples in the rdma-vm when every turn, completion and poll read it).
pub(crate) struct SparseClock {
    at: Instant,
    calls: u32,
}

impl SparseClock {
    pub(crate) fn new() -> SparseClock {
        SparseClock { at: Instant::now(), calls: 0 }
    }

    pub(crate) fn now(&mut self) -> Instant {
        if self.calls == 0 {
            self.at = Instant::now();
        }
        self.calls = (self.calls + 1) % CLOCK_CALLS;
        self.at
    }

    /// The next [`SparseClock::now`] reads the clock (after a sleep).
    pub(crate) fn stale(&mut self) {
        self.calls = 0;
    }
}

/// Handles every completion there is; returns whether there was any.
pub(crate) fn poll_cq(st: &mut State) -> bool {
    let mut any = false;
    for _ in 0..64 {
        let mut wcs = std::mem::take(&mut st.wcs);
        let got = st.dev.poll(&mut wcs).unwrap_or_default();
        for wc in &wcs[..got] {
            let (peer, kind, index) = split_wr_id(wc.wr_id());
            if peer >= st.peers.len() {
                continue;
            }
            if let Some((status, vendor)) = wc.error() {
                if st.peers[peer].link == Link::Up {
                    st.fail(peer, format!("work request failed: status {status} (vendor error {vendor})"));
                } else {
                    // Flushed after the failure or goodbye.
                    free_after_failure(st, peer, kind, index);
                }
                continue;
            }
            match kind {
                KIND_RECV => st.arrived(peer, index, wc.len(), wc.imm_data().map(u32::from_be)),
                KIND_SEND | KIND_CHUNK | KIND_WRITE => {
                    st.send_done(peer, index);
                    // Frames that waited to be posted together go now.
                    if st.peers[peer].has_queued() {
                        st.pump(peer);
                    }
                    if st.peers[peer].write_wanted && !st.peers[peer].write_busy && !st.closed {
                        st.write_mailbox(peer, false);
                    }
                }
                _ => {}
            }
        }
        st.wcs = wcs;
        any |= got > 0;
        if got < st.wcs.len() {
            break;
        }
    }
    any
}

fn free_after_failure(st: &mut State, peer: usize, kind: u64, index: u32) {
    if kind != KIND_RECV {
        st.send_done(peer, index);
    }
}

#[repr(C)]
struct PollFd {
    fd: c_int,
    events: c_short,
    revents: c_short,
}

extern "C" {
    fn poll(fds: *mut PollFd, n: u64, timeout_ms: c_int) -> c_int;
}

/// Waits up to `d` for the completion channel's descriptor to be readable.
fn wait_channel(fd: c_int, d: Duration) {
    let mut p = PollFd { fd, events: 1, revents: 0 };
    let ms = d.as_millis().clamp(1, 1000) as c_int;
    // SAFETY: `poll(2)` on one `pollfd` that outlives the call; the result is not needed.
    unsafe { poll(&mut p, 1, ms) };
}

/// The progress thread's loop; returns when the transport is closed (after its goodbyes, or
/// `linger`) or killed.
pub(crate) fn run(shared: Arc<Shared>) {
    let (hb, mode, credit_poll, sleep_max, linger) = {
        let st = lock(&shared.state);
        let o = &st.opts;
        (o.heartbeat_interval, o.completion, o.credit_poll, o.poll_sleep_max, o.linger)
    };
    let mut idle: u32 = 0;
    let mut closing_since: Option<Instant> = None;
    let mut clock = SparseClock::new();
    let mut last_work = Instant::now();
    loop {
        let now = clock.now();
        let mut st = lock(&shared.state);
        if st.killed {
            return;
        }
        let s = step(&mut st, now);
        let next_beat = st.next_beat;
        if s.worked {
            last_work = now;
        }
        if st.closed {
            // Frames accepted before the close go out while they make progress: a peer that
            // takes nothing for a heartbeat interval is not waited for (it may be closing
            // too, or gone), and nothing is waited for longer than `linger`.
            let since = *closing_since.get_or_insert(now);
            let stalled = now.saturating_duration_since(last_work.max(since)) > hb;
            if st.drained() || stalled || now.saturating_duration_since(since) > linger {
                goodbye(&mut st, hb.min(linger));
                return;
            }
        }
        let waker = if st.wake {
            st.wake = false;
            st.waker.clone()
        } else {
            None
        };
        let channel = mode == Completion::Channel && !s.waiting && !s.worked && !st.closed;
        if channel && (st.dev.arm().is_err() || poll_cq(&mut st)) {
            drop(st);
            if let Some(w) = waker {
                w.wake();
            }
            continue;
        }
        let fd = st.dev.channel_fd();
        drop(st);
        if let Some(w) = waker {
            w.wake();
        }
        if s.worked {
            idle = 0;
            continue;
        }
        if channel {
            wait_channel(fd, next_beat.saturating_duration_since(Instant::now()));
            lock(&shared.state).dev.take_event();
            clock.stale();
        } else if s.waiting {
            std::thread::sleep(credit_poll);
            clock.stale();
        } else {
            idle = idle.saturating_add(1);
            if idle < 200 {
                std::thread::yield_now();
            } else {
                let d = Duration::from_micros(20u64 << (idle - 200).min(6)).min(sleep_max);
                std::thread::sleep(d.min(next_beat.saturating_duration_since(now)));
                clock.stale();
            }
        }
    }
}

/// Writes the goodbye into every live peer's mailbox and waits (up to `wait`) for the
/// writes to complete.
fn goodbye(st: &mut State, wait: Duration) {
    let n = st.peers.len();
    let until = Instant::now() + wait;
    for p in 0..n {
        if p == st.me || st.peers[p].link == Link::Failed {
            continue;
        }
        // A write in flight completes first; then the goodbye.
        while st.peers[p].write_busy && Instant::now() < until {
            poll_cq(st);
        }
        st.write_mailbox(p, true);
    }
    while st.peers.iter().any(|p| p.write_busy && p.link != Link::Failed) && Instant::now() < until {
        poll_cq(st);
        std::thread::yield_now();
    }
}

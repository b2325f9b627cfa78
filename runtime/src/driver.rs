//! The driver thread: the loop that moves frames between a transport and a [`Node`], feeds it
//! the workers' commands and timers, and hands completions back. It carries out the core's
//! contract and decides nothing about the protocol.

use std::collections::VecDeque;
use std::sync::atomic::{fence, Ordering::SeqCst};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::task::Waker;
use std::thread;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use parma_core::transport::{SendError, TransportEvent};
use parma_core::wire::WriteKind;
use parma_core::{
    Clock, Completion, Instant, IntentKind, Key, Node, NodeId, OpError, Ticket, Transmit, Transport, WorkerId,
};

use crate::error::Undrained;
use crate::shared::{Shared, RUNNING, STOP_GRACEFUL};
use crate::stats::DriverStats;

/// Frames taken from the transport per look, between which the node's appetite is checked.
const RECV_BATCH: usize = 64;
/// Commands taken per loop turn, so frames and timers are not starved.
const COMMAND_BATCH: usize = 256;
/// Sleep while a send waits for room, should the transport's wake get lost.
const BLOCKED_RETRY: StdDuration = StdDuration::from_millis(1);
/// Sleep while draining, between looks at the drain condition.
const DRAIN_RECHECK: StdDuration = StdDuration::from_millis(5);

/// A worker's operation that needs the node, as it travels through the command queue.
#[derive(Debug)]
pub(crate) enum Command {
    Pull {
        worker: WorkerId,
        ticket: Ticket,
        keys: Vec<Key>,
    },
    Write {
        worker: WorkerId,
        ticket: Ticket,
        write: WriteKind,
        keys: Vec<Key>,
        values: Vec<f32>,
    },
    Localize {
        worker: WorkerId,
        ticket: Ticket,
        keys: Vec<Key>,
    },
    Barrier {
        worker: WorkerId,
        ticket: Ticket,
    },
    Intent {
        worker: WorkerId,
        keys: Vec<Key>,
        start: Clock,
        end: Clock,
        kind: IntentKind,
    },
    AdvanceClock {
        worker: WorkerId,
    },
    EndIntents {
        worker: WorkerId,
    },
    /// Wait at the clock gate (`Node::gate`).
    Gate {
        worker: WorkerId,
        ticket: Ticket,
    },
    /// The worker advances its clock no more (`Node::retire`).
    Retire {
        worker: WorkerId,
    },
    WaitSync {
        worker: WorkerId,
        ticket: Ticket,
    },
    /// A worker registered sampling distributions in the node's shared registry.
    AnnounceDistributions,
    /// A worker prepared samples: make their keys local for the window (`Node::sample_intent`).
    SampleIntent {
        worker: WorkerId,
        keys: Vec<Key>,
        start: Clock,
        end: Clock,
    },
}

/// Closes the shared state when the driver exits, also when it unwinds from a panic.
pub(crate) struct CloseOnExit(pub(crate) Arc<Shared>);

impl Drop for CloseOnExit {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Frames the node produced that the transport has not taken yet, FIFO per destination.
#[derive(Debug, Default)]
struct Outgoing {
    queues: Vec<VecDeque<Transmit>>,
    total: usize,
}

impl Outgoing {
    fn push(&mut self, t: Transmit) {
        let i = t.to().index();
        if i >= self.queues.len() {
            self.queues.resize_with(i + 1, VecDeque::new);
        }
        self.queues[i].push_back(t);
        self.total += 1;
    }

    /// Drops every frame queued to `peer`; returns how many.
    fn drop_peer(&mut self, peer: NodeId) -> usize {
        let Some(q) = self.queues.get_mut(peer.index()) else { return 0 };
        let n = q.len();
        q.clear();
        self.total -= n;
        n
    }
}

/// Drains the node's outputs after an input: the driver's contract.
fn drain(node: &mut Node, out: &mut Outgoing, shared: &Shared, stats: &mut DriverStats) {
    while let Some(t) = node.poll_transmit() {
        out.push(t);
    }
    while let Some(ev) = node.poll_event() {
        let (worker, ticket, result) = ev.into_parts();
        deliver(shared, stats, worker, ticket, result);
    }
}

fn deliver(
    shared: &Shared,
    stats: &mut DriverStats,
    worker: WorkerId,
    ticket: Ticket,
    result: Result<Completion, OpError>,
) {
    if shared.slots.get(worker.index()).is_some_and(|s| s.deliver(ticket, result)) {
        stats.completions += 1;
    } else {
        stats.completions_orphaned += 1;
    }
}

pub(crate) struct Driver<T> {
    node: Node,
    transport: T,
    shared: Arc<Shared>,
    commands: Receiver<Command>,
    /// A command taken from the queue while checking for work, not yet applied.
    stash: Option<Command>,
    out: Outgoing,
    origin: StdInstant,
    stats: DriverStats,
    /// The transport closed under us (the node was killed): nothing more can be done.
    dead: bool,
    /// When a stop's drain gives up.
    drain_until: Option<StdInstant>,
}

impl<T> Driver<T> {
    /// What the driver shares with the runtime handle and the workers.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

/// What a turn of the driver's loop leaves to whoever runs it.
#[derive(Debug)]
pub(crate) enum Turn {
    /// Something happened: turn again.
    Again,
    /// Nothing to do: sleep until the driver's waker fires, at most this long.
    Idle(StdDuration),
    /// The driver stopped: call `end`.
    Done(Result<(), Undrained>),
}

impl<T: Transport> Driver<T> {
    pub(crate) fn new(node: Node, transport: T, shared: Arc<Shared>, commands: Receiver<Command>) -> Self {
        Driver {
            node,
            transport,
            shared,
            commands,
            stash: None,
            out: Outgoing::default(),
            origin: StdInstant::now(),
            stats: DriverStats::default(),
            dead: false,
            drain_until: None,
        }
    }

    /// The loop on a thread of its own (`parma-driver-<id>`). Returns whether the node drained
    /// before it stopped, and if not, why.
    pub(crate) fn run(mut self) -> Result<(), Undrained> {
        let _close = CloseOnExit(Arc::clone(&self.shared));
        let waker = crate::host::unpark_waker(thread::current());
        self.begin(&waker);
        loop {
            match self.turn() {
                Turn::Again => {}
                Turn::Idle(d) => thread::park_timeout(d),
                Turn::Done(drained) => break self.end(drained),
            }
        }
    }

    /// Before the first turn: `waker` is what the transport, the workers and the runtime
    /// handle wake the driver with.
    pub(crate) fn begin(&mut self, waker: &Waker) {
        self.transport.register_waker(waker);
        let _ = self.shared.driver.set(waker.clone());
    }

    /// One turn of the loop: every input source once, then whether to go on at once, to sleep
    /// (at most the given time, until the waker fires), or to stop.
    pub(crate) fn turn(&mut self) -> Turn {
        self.shared.sleeping.store(false, SeqCst);
        let now = self.now();
        let progress = self.step(now);
        if self.shared.stats_requested.load(SeqCst) && self.shared.stats_requested.swap(false, SeqCst) {
            self.publish();
        }
        if self.dead {
            return Turn::Done(Err(Undrained::TransportClosed));
        }
        let mode = self.shared.stop.load(SeqCst);
        if mode != RUNNING && self.shared.aborted.get().is_some() {
            // Nothing more is done for the workers: no drain to wait for.
            return Turn::Done(Err(Undrained::Aborted));
        }
        if mode != RUNNING {
            let until =
                *self.drain_until.get_or_insert_with(|| StdInstant::now() + self.shared.opts.drain_timeout);
            if self.is_drained(mode) {
                return Turn::Done(Ok(()));
            }
            if StdInstant::now() >= until {
                return Turn::Done(Err(self.undrained(mode)));
            }
        }
        if progress {
            return Turn::Again;
        }
        self.idle(now, mode)
    }

    /// After the last turn: publishes the counters and closes the transport.
    pub(crate) fn end(mut self, drained: Result<(), Undrained>) -> Result<(), Undrained> {
        self.publish();
        self.transport.close();
        drained
    }

    /// Microseconds since the driver started.
    fn now(&self) -> Instant {
        Instant(u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX))
    }

    /// One turn: every input source once. Returns whether anything happened.
    fn step(&mut self, now: Instant) -> bool {
        let mut progress = self.transport_events(now);
        progress |= self.flush(now);
        progress |= self.receive(now);
        progress |= self.take_commands(now);
        progress |= self.timers(now);
        progress |= self.flush(now);
        progress
    }

    /// The node may take new work from the workers: its outbox and the frames we could not
    /// send yet are within `Config::outbox_frames_max`. This is the back-pressure on workers.
    fn accepting_commands(&self) -> bool {
        self.node.wants_input() && self.out.total < self.node.config().outbox_frames_max
    }

    /// The node may take frames from peers. Frames keep being read above the outbox bound, up
    /// to `Options::unsent_frames_max`: two nodes that both stopped reading because their
    /// sends to each other block would wait for each other forever. Work admitted through
    /// commands bounds how far the unsent frames grow; the ceiling guards against a peer that
    /// sends without ever reading.
    fn accepting_frames(&self) -> bool {
        self.node.wants_input() && self.out.total < self.shared.opts.unsent_frames_max
    }

    fn transport_events(&mut self, now: Instant) -> bool {
        let mut any = false;
        while let Some(ev) = self.transport.poll_event() {
            any = true;
            if let TransportEvent::PeerFailed(peer) = ev {
                self.stats.peers_failed += 1;
                self.peer_failed(now, peer);
            }
        }
        any
    }

    fn peer_failed(&mut self, now: Instant, peer: NodeId) {
        {
            let mut failed =
                self.shared.failed_peers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if !failed.contains(&peer) {
                failed.push(peer);
            }
        }
        self.stats.frames_dropped += self.out.drop_peer(peer) as u64;
        self.node.handle_peer_failed(now, peer);
        drain(&mut self.node, &mut self.out, &self.shared, &mut self.stats);
    }

    /// Hands queued frames to the transport, in order per destination.
    fn flush(&mut self, now: Instant) -> bool {
        if self.out.total == 0 {
            return false;
        }
        let mut sent = false;
        let mut failed = Vec::new();
        let mut refused = Vec::new();
        let (out, stats) = (&mut self.out, &mut self.stats);
        for (i, q) in out.queues.iter_mut().enumerate() {
            while let Some(t) = q.front() {
                let len = t.encoded_len();
                let mut encoded = Ok(0);
                let r = self.transport.try_send(t.to(), len, &mut |buf| encoded = t.encode(buf));
                match r {
                    Ok(()) => {
                        debug_assert!(encoded.is_ok(), "encoding into encoded_len() bytes failed");
                        q.pop_front();
                        out.total -= 1;
                        stats.frames_sent += 1;
                        stats.bytes_sent += len as u64;
                        sent = true;
                    }
                    Err(SendError::WouldBlock) => {
                        stats.sends_blocked += 1;
                        break;
                    }
                    Err(SendError::PeerFailed) => {
                        failed.push(NodeId(i as u16));
                        break;
                    }
                    Err(SendError::Closed) => {
                        self.dead = true;
                        return sent;
                    }
                    Err(_) => {
                        // Too large or unknown peer: the frame can never go. The node fails
                        // whatever waits for it.
                        if let Some(t) = q.pop_front() {
                            refused.push(t);
                        }
                        out.total -= 1;
                        stats.frames_dropped += 1;
                    }
                }
            }
        }
        for t in refused {
            self.node.handle_send_refused(now, t);
            drain(&mut self.node, &mut self.out, &self.shared, &mut self.stats);
        }
        for peer in failed {
            self.peer_failed(now, peer);
        }
        sent
    }

    fn receive(&mut self, now: Instant) -> bool {
        if self.dead || !self.accepting_frames() {
            return false;
        }
        let (node, out, shared, stats) = (&mut self.node, &mut self.out, &*self.shared, &mut self.stats);
        let got = self.transport.poll_recv(RECV_BATCH, &mut |from, frame| {
            stats.frames_received += 1;
            node.handle_frame(now, from, frame);
            drain(node, out, shared, stats);
        });
        match got {
            Ok(n) => n > 0,
            Err(_) => {
                self.dead = true;
                true
            }
        }
    }

    fn take_commands(&mut self, now: Instant) -> bool {
        let mut n = 0;
        while n < COMMAND_BATCH && self.accepting_commands() {
            let Some(cmd) = self.stash.take().or_else(|| self.commands.try_recv().ok()) else { break };
            self.apply(now, cmd);
            n += 1;
        }
        n > 0
    }

    fn apply(&mut self, now: Instant, cmd: Command) {
        let node = &mut self.node;
        let (worker, ticket, result) = match cmd {
            Command::Pull { worker, ticket, keys } => (worker, ticket, node.pull(now, worker, ticket, &keys)),
            Command::Write { worker, ticket, write, keys, values } => {
                (worker, ticket, node.push(now, worker, ticket, write, &keys, &values))
            }
            Command::Localize { worker, ticket, keys } => {
                (worker, ticket, node.localize(now, worker, ticket, &keys))
            }
            Command::Barrier { worker, ticket } => (worker, ticket, node.barrier(now, worker, ticket)),
            Command::WaitSync { worker, ticket } => (worker, ticket, node.wait_sync(now, worker, ticket)),
            Command::Gate { worker, ticket } => (worker, ticket, node.gate(now, worker, ticket)),
            Command::Intent { worker, keys, start, end, kind } => {
                // Intents have no ticket: a refused one (bounds) is counted, not reported.
                if node.intent(now, worker, &keys, start, end, kind).is_err() {
                    self.stats.intents_dropped += 1;
                }
                self.stats.commands += 1;
                drain(&mut self.node, &mut self.out, &self.shared, &mut self.stats);
                return;
            }
            Command::AdvanceClock { worker } => {
                let _ = node.advance_clock(now, worker);
                self.stats.commands += 1;
                // Under a gate the clock may let waiters pass and a flushed clock go out.
                drain(&mut self.node, &mut self.out, &self.shared, &mut self.stats);
                return;
            }
            Command::EndIntents { worker } => {
                let _ = node.end_intents(now, worker);
                self.stats.commands += 1;
                return;
            }
            Command::Retire { worker } => {
                let _ = node.retire(now, worker);
                self.stats.commands += 1;
                drain(&mut self.node, &mut self.out, &self.shared, &mut self.stats);
                return;
            }
            Command::SampleIntent { worker, keys, start, end } => {
                // Like intents, without a ticket: a refused one is counted, not reported.
                if node.sample_intent(now, worker, &keys, start, end).is_err() {
                    self.stats.intents_dropped += 1;
                }
                self.stats.commands += 1;
                drain(&mut self.node, &mut self.out, &self.shared, &mut self.stats);
                return;
            }
            Command::AnnounceDistributions => {
                node.announce_distributions(now);
                self.stats.commands += 1;
                drain(&mut self.node, &mut self.out, &self.shared, &mut self.stats);
                return;
            }
        };
        self.stats.commands += 1;
        if let Err(e) = result {
            deliver(&self.shared, &mut self.stats, worker, ticket, Err(e));
        }
        drain(&mut self.node, &mut self.out, &self.shared, &mut self.stats);
    }

    fn timers(&mut self, now: Instant) -> bool {
        match self.node.poll_timeout() {
            Some(t) if t <= now => {
                self.node.handle_timeout(now);
                drain(&mut self.node, &mut self.out, &self.shared, &mut self.stats);
                true
            }
            _ => false,
        }
    }

    /// What is still outstanding when the drain timeout runs out.
    fn undrained(&self, mode: u8) -> Undrained {
        Undrained::TimedOut {
            workers_live: if mode == STOP_GRACEFUL { self.shared.workers_live.load(SeqCst) } else { 0 },
            commands_waiting: self.stash.is_some(),
            frames_unsent: self.out.total,
            node_busy: !self.node.is_idle(),
        }
    }

    fn is_drained(&mut self, mode: u8) -> bool {
        if mode == STOP_GRACEFUL && self.shared.workers_live.load(SeqCst) > 0 {
            return false;
        }
        if self.stash.is_none() {
            self.stash = self.commands.try_recv().ok();
        }
        self.stash.is_none() && self.out.total == 0 && self.node.is_idle()
    }

    /// With nothing to do: how long the driver may sleep, until woken (a command, a frame,
    /// room to send) or the next timer. Announces the sleep to the workers first (`sleeping`),
    /// then looks at the command queue once more, so that a command queued meanwhile is not
    /// slept over (a Dekker handshake with `Shared::nudge_driver`).
    fn idle(&mut self, now: Instant, mode: u8) -> Turn {
        let opts = &self.shared.opts;
        let mut d = opts.idle_park_max;
        if let Some(t) = self.node.poll_timeout() {
            d = d.min(StdDuration::from_micros(t.saturating_since(now).as_micros()));
        }
        if self.transport.needs_polling() {
            d = d.min(opts.poll_interval);
        }
        if self.out.total > 0 {
            d = d.min(BLOCKED_RETRY);
        }
        if mode != RUNNING {
            d = d.min(DRAIN_RECHECK);
        }
        self.shared.sleeping.store(true, SeqCst);
        fence(SeqCst);
        if self.stash.is_none() {
            self.stash = self.commands.try_recv().ok();
        }
        if self.stash.is_none() && !self.shared.stats_requested.load(SeqCst) {
            self.stats.parks += 1;
            Turn::Idle(d)
        } else {
            self.shared.sleeping.store(false, SeqCst);
            Turn::Again
        }
    }

    fn publish(&self) {
        let mut p = self.shared.published();
        p.node = self.node.stats().clone();
        p.driver = self.stats;
        p.transport = self.transport.counters();
        p.generation += 1;
        drop(p);
        self.shared.published_cv.notify_all();
    }
}

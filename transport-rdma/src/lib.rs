//! # parma-transport-rdma: frames between processes over RDMA verbs
//!
//! ## Room
//!
//! This crate implements [`parma_core::Transport`] over InfiniBand or RoCE with the `ibverbs`
//! crate (libibverbs). It is outside the default workspace build (the workspace `exclude`s
//! it, as it does `fuzz/`): building it needs libibverbs and its headers, and running it an
//! RDMA device. CI builds it and runs its tests in a VM with a Soft-RoCE device
//! (`../shared/tools/rdma-vm`, `.ci/run`). It never panics on what a peer sends: a peer that
//! breaks the protocol is failed, with the reason in [`RdmaTransport::failure`].
//!
//! ## How frames move
//!
//! - **one RC queue pair per peer**, on one completion queue per node. Queue-pair numbers,
//!   GIDs, mailbox and ring addresses are exchanged over one short TCP connection per pair to the
//!   address each node advertised through the start-up's peer table (`rdma://host:port`),
//!   authenticated with the cluster token (`connect.rs`);
//! - **two wires** ([`Wire`], the same on every node). [`Wire::Ring`]: per peer, a registered
//!   receive ring of `ring_len` bytes (2 MiB) at the receiver, in its own memory region, and
//!   a send ring of the same size at the sender. A frame of at most half the ring (less a
//!   4-byte head, its length) is encoded after its head straight into the send ring and
//!   RDMA-WRITTEN with immediate data to the next free bytes of the peer's ring (a frame
//!   that would cross the ring's end starts the next lap, the skipped bytes counted as used).
//!   Frames that wait together and lie end to end in one lap leave in one WRITE (**packed**,
//!   up to 64 KiB and 64 frames). The immediate data says the WRITE's length, whether it
//!   skipped, and that it is packed; the receiver, which tracks the same position, checks
//!   them and walks the heads (`ring.rs`): a WRITE longer than half the ring, one that
//!   crosses the end, a wrong skip, heads that do not tile it exactly, bytes past the free
//!   ones or frames past the credits fail the peer; the NIC itself refuses a write outside
//!   the ring's region. Each frame is handed to the sink straight from the ring.
//!   [`Wire::Send`]: per peer, `recv_slots` receives of `slot_len` bytes posted from the
//!   start and `send_slots` send slots; a frame of at most `slot_len` bytes is encoded into
//!   a registered send slot, sent with SEND with immediate data and handed to the sink from
//!   the receive slot it landed in. Neither copies on either side;
//! - **longer frames** (up to `frame_len_max`) are encoded into a per-peer registered buffer
//!   (grown on demand, registered once per size) and sent from it in chunks (`slot_len`, or
//!   a quarter of the ring), with no copy on the sender; the receiver copies the chunks into
//!   one reassembly buffer per peer as they arrive, so its memory stays `frame_len_max` per
//!   peer and chunks never wait for slots or ring bytes;
//! - **credits**: [`Wire::Ring`]: a sender has at most `ring_len` bytes and `ring_msgs`
//!   records (frames, or chunks of a long one) unfreed in the peer's ring (a WRITE with
//!   immediate data consumes one of the `ring_msgs` empty receives posted per peer, posted
//!   again as its completion is taken, so a packed WRITE uses fewer receives than credits);
//!   the receiver frees a record's bytes, in ring order, once the sink returned the frame.
//!   [`Wire::Send`]: at most `recv_slots` messages unfreed, a slot posted again before it
//!   is granted. Either way the receiver returns credits (freed messages, and freed ring
//!   bytes) by RDMA WRITE into the sender's mailbox once a quarter of the window is free (no
//!   receive consumed, so credit returns never need credits). RNR retries are only a safety
//!   net (`rnr_retry` 6, then the peer fails): the receiver never runs out of posted
//!   receives;
//! - **selective signalling, posting lists**: one send in `send_slots / 4` (at most 16) is
//!   signalled, and its completion frees every send before it (an RC send queue completes in
//!   order); a send is also signalled when it is the last chunk of a long frame, fills the
//!   send queue, leaves fewer than that many send slots free, or (ring) empties the queue of
//!   frames waiting for credits, so that a sender short of slots or ring bytes gets them back
//!   as soon as it can, and one that finds none always has a completion coming. Mailbox
//!   writes are always signalled. The sends that credits let go at once are posted as one linked list of up to
//!   32 work requests (one `ibv_post_send`, one doorbell). A send that fails completes in
//!   error signalled or not, and fails the peer;
//! - **back-pressure**: a frame is accepted while a send slot or send-ring room (and, ring,
//!   fewer than `send_slots` frames waiting for credits), or the large buffer, is free;
//!   otherwise `try_send` answers `WouldBlock`, and the waker fires when a signalled send
//!   completes;
//! - **failure**: a work completion in error, a peer's heartbeat (a counter in the same
//!   mailbox WRITE, every `heartbeat_interval`) unchanged for `peer_timeout`, or its goodbye
//!   (written on close, after its last frames) becomes
//!   [`parma_core::transport::TransportEvent::PeerFailed`], once. A goodbye names the first peer its
//!   sender lost, if any, and that one is reported failed first, so that what waits here names
//!   the node that failed rather than one that stopped because of it.
//!
//! ## Choices, and what they rest on
//!
//! - **[`Wire::Ring`] by default, [`Wire::Send`] kept as an option: measured.** In one boot
//!   of the VM, four rounds each between two `ib_send_bw` runs (`docs/performance-transports.md`,
//!   "RDMA transport"): at 1 KiB the ring reached 0.51 to 0.89 of `ib_send_bw` against 0.20 to
//!   0.44 for SEND/RECV, ahead in every round by 1.8 to 3.4 times (1.7 to 2.1 in another
//!   boot); at 64 KiB the two were within the VM's noise (0.43 to 1.13 against 0.44 to
//!   1.27, while the same SEND/RECV code swung from 0.41 to 1.75 in that boot); both before
//!   the packed writes below. SEND/RECV's window is 32 messages per peer of any length, and its 1 KiB sender was turned away some 250,000 times per 20,000 frames; the
//!   ring's is counted in bytes, 2 MiB per peer (the memory the 32 receive slots took) for
//!   up to 1,024 records, and the same sender was never turned away. What the ring costs:
//!   both ends track ring positions (`ring.rs`, with every check on a peer's record), and a
//!   frame's bytes stay in the ring until the sink returns it, so a frame held long holds
//!   the ring bytes after it. A WRITE with immediate data still consumes one receive per
//!   frame at the receiver (for the completion), so the ring saves no receive bookkeeping;
//!   it buys the window.
//! - **Batched doorbells in the ring, measured:** while 8 or more sends are in flight to a
//!   peer (`batch_above_inflight`), a frame accepted waits to be posted with the ones after
//!   it, as one list, at the next completion or progress step; with fewer it goes at once,
//!   so a lone frame never waits. On rxe each doorbell is a system call that runs the
//!   requester; in two boots (seven rounds) this was ahead of posting each frame at once in
//!   every round at 1 KiB (1.1 to 1.9 times) and in six of seven at 64 KiB. A threshold of
//!   4 measured level with 8, one of 16 behind both at 64 KiB.
//! - **Packed writes, measured:** frames that wait for the same post (the batching above)
//!   and lie end to end share one WRITE. In one boot, four rounds alternating with the
//!   build before (`docs/performance-transports.md`, "RDMA transport"), one-way 1 KiB frames went
//!   2.4 to 3.8 times as fast (16 to 23 MB/s against 5.5 to 6.6), 1.4 to 3.2 times
//!   `ib_send_bw`; 64 KiB frames, which never share a WRITE, within the noise. Each frame
//!   costs a 4-byte head in the ring. A lone frame still leaves at once, so latency does
//!   not change.
//! - **The clock read sparingly, measured:** the progress loop reads it after a sleep and
//!   otherwise every 16th turn, a receive completion marks its peer heard (the loop stamps
//!   it with its own reading), and `poll_recv` reads it every 16th call (`SparseClock`).
//!   In the VM the guest's clock is the emulated HPET, and reading it once per turn, per
//!   completion and per poll was a quarter of a 64 KiB run's samples (549 samples instead
//!   of 2,817 after). The timers it serves count in hundreds of milliseconds.
//! - **Polling by default** ([`Completion::Poll`]), measured in the VM against the completion
//!   channel ([`Completion::Channel`]) in the same boots (`docs/performance-transports.md`,
//!   "RDMA transport"): in the latest boot the one-key pull's median round trip was 0.79 and 0.70
//!   ms polling against 2.5 and 1.2 ms with the channel (two rounds), in earlier ones 0.43
//!   and 2.5 ms against 0.91 and 0.74 ms, and 1.3 to 2.9 ms against 1.3 to 5.7 ms; one-way
//!   1 KiB throughput with the channel was about three quarters of polling's. The
//!   channel costs a kernel wake-up per idle-to-busy transition on each hop; polling costs a
//!   core spinning (yielding) for 200 looks after each piece of work, then sleeps of 20 µs
//!   doubling to `poll_sleep_max` (1 ms), which bounds what an idle node adds to a first frame.
//!   The evidence is weak (the VM emulates its CPUs on a loaded host); on nodes whose cores
//!   the training threads need, the channel is the option to try first.
//!
//! ## Use
//!
//! ```no_run
//! use std::sync::Arc;
//! use parma_core::NodeId;
//! use parma_runtime::startup::ClusterToken;
//! use parma_transport_rdma::{Bound, RdmaOptions};
//!
//! let token = Arc::new(ClusterToken::from_process_env().unwrap());
//! let bound = Bound::bind(RdmaOptions::loopback()).unwrap();
//! let my_endpoint = bound.endpoint().to_string(); // rdma://127.0.0.1:port, via the rendezvous
//! # let peer_endpoints = vec![my_endpoint.clone()];
//! let transport = bound.start(NodeId(0), peer_endpoints, 0x1234, token).unwrap();
//! ```

mod connect;
mod progress;
mod ring;
mod start;
mod state;
mod verbs;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::thread::JoinHandle;
use std::time::Duration;

use parma_core::transport::{RecvError, SendError, Transport, TransportCounters, TransportEvent};
use parma_core::NodeId;

pub use start::{local_cluster, local_cluster_with, Bound};
use state::{Lent, State};

/// How the progress thread learns of completions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Sleeps on the completion channel when idle.
    Channel,
    /// Polls the completion queue, spinning (yielding) a while after work, then sleeping in
    /// growing steps up to `poll_sleep_max` (the default; see the crate docs).
    Poll,
}

/// How frames travel to a peer (see the crate docs for the choice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// SEND with immediate data into `recv_slots` posted receives of `slot_len` bytes per
    /// peer; a window of `recv_slots` messages.
    Send,
    /// RDMA WRITE with immediate data into a ring of `ring_len` bytes per peer at the
    /// receiver; a window of `ring_len` bytes and `ring_msgs` messages.
    Ring,
}

/// Options of one node's transport; the ring sizes and timers must be the same on every
/// node.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RdmaOptions {
    /// Where to listen for the queue-pair handshakes: `host:port` (port 0 picks one).
    pub bind: String,
    /// What peers connect to, if not the bound address (`host` or `host:port`); required
    /// when binding a wildcard address.
    pub advertise: Option<String>,
    /// The RDMA device (`mlx5_0`, `rxe0`); `None`: the first one.
    pub device: Option<String>,
    /// The GID table entry to use (RoCE: pick the RoCEv2 entry of the interface's address);
    /// `None`: the first IPv4-mapped entry, else entry 0.
    pub gid_index: Option<u8>,
    /// How frames travel.
    pub wire: Wire,
    /// [`Wire::Send`]: bytes of one ring slot, the longest frame sent without chunking.
    pub slot_len: usize,
    /// [`Wire::Send`]: receives posted per peer, the credits a peer gets.
    pub recv_slots: usize,
    /// [`Wire::Send`]: send slots per peer, frames accepted and not yet completed.
    /// [`Wire::Ring`]: frames per peer accepted and waiting for credits. Either: a quarter
    /// of it (at most 16) is how often an unforced send is signalled.
    pub send_slots: usize,
    /// [`Wire::Ring`]: bytes of the ring each node keeps for each peer's frames, and of its
    /// send ring to each peer; frames up to half of it go in one WRITE, longer ones in
    /// quarter-ring chunks.
    pub ring_len: usize,
    /// [`Wire::Ring`]: records a peer may have written and not yet freed (empty receives
    /// posted per peer).
    pub ring_msgs: usize,
    /// [`Wire::Ring`]: with at least this many sends in flight to a peer, a frame accepted
    /// is not posted at once but with the next ones, as one list (0: always at once).
    pub batch_above_inflight: usize,
    /// Longest frame accepted.
    pub frame_len_max: usize,
    /// Frames a node may have queued to itself and not yet received.
    pub self_frames_max: usize,
    /// The mailbox (heartbeat and credits) is written at least this often.
    pub heartbeat_interval: Duration,
    /// A peer whose heartbeat does not change for this long has failed.
    pub peer_timeout: Duration,
    /// How long the handshakes of [`Bound::start`] may take in all.
    pub connect_timeout: Duration,
    /// How long [`Transport::close`] keeps sending frames already accepted.
    pub linger: Duration,
    /// How completions are waited for.
    pub completion: Completion,
    /// Sleep between looks at the mailboxes while sends wait for credits.
    pub credit_poll: Duration,
    /// Longest sleep of an idle polling thread ([`Completion::Poll`]).
    pub poll_sleep_max: Duration,
    /// The verbs' ACK timeout exponent (4.096 µs × 2^n) and retries before a queue pair
    /// errs: 14 and 7 make about 0.5 s.
    pub qp_timeout: u8,
    pub qp_retry: u8,
}

impl RdmaOptions {
    /// Handshakes on a free port of 127.0.0.1; the first device; the GID index from
    /// `PARMA_RDMA_GID_INDEX` or `RDMA_VM_GID_INDEX` if set.
    pub fn loopback() -> RdmaOptions {
        let gid_index = ["PARMA_RDMA_GID_INDEX", "RDMA_VM_GID_INDEX"]
            .iter()
            .find_map(|v| std::env::var(v).ok().and_then(|s| s.trim().parse().ok()));
        RdmaOptions {
            bind: "127.0.0.1:0".into(),
            advertise: None,
            device: std::env::var("PARMA_RDMA_DEVICE").ok(),
            gid_index,
            wire: Wire::Ring,
            slot_len: 64 << 10,
            recv_slots: 32,
            send_slots: 32,
            ring_len: 2 << 20,
            ring_msgs: 1024,
            batch_above_inflight: 8,
            frame_len_max: 16 << 20,
            self_frames_max: 4096,
            heartbeat_interval: Duration::from_millis(500),
            peer_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(30),
            linger: Duration::from_secs(2),
            completion: Completion::Poll,
            credit_poll: Duration::from_micros(20),
            poll_sleep_max: Duration::from_millis(1),
            qp_timeout: 14,
            qp_retry: 7,
        }
    }

    /// Most work requests outstanding on one send queue.
    pub(crate) fn send_wr_max(&self) -> u32 {
        match self.wire {
            Wire::Send => (self.send_slots + 64) as u32,
            Wire::Ring => (self.ring_msgs.min(256) + 64) as u32,
        }
    }

    /// Receives posted per peer.
    pub(crate) fn recvs_per_peer(&self) -> usize {
        match self.wire {
            Wire::Send => self.recv_slots,
            Wire::Ring => self.ring_msgs,
        }
    }

    /// The longest frame sent as one message; longer ones go in chunks of [`Self::chunk_len`].
    pub(crate) fn inline_len_max(&self) -> usize {
        match self.wire {
            Wire::Send => self.slot_len,
            Wire::Ring => self.ring_len / 2 - crate::ring::PACK_HEAD,
        }
    }

    pub(crate) fn chunk_len(&self) -> usize {
        match self.wire {
            Wire::Send => self.slot_len,
            Wire::Ring => self.ring_len / 4,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        let checks = [
            (self.slot_len >= 64 && self.slot_len <= 1 << 30, "slot_len must be 64 bytes to 1 GiB"),
            (self.recv_slots >= 4 && self.recv_slots <= 4096, "recv_slots must be 4 to 4096"),
            (self.send_slots >= 1 && self.send_slots <= 4096, "send_slots must be 1 to 4096"),
            (self.ring_len >= 256 && self.ring_len <= 1 << 29, "ring_len must be 256 bytes to 512 MiB"),
            (self.ring_msgs >= 4 && self.ring_msgs <= 16384, "ring_msgs must be 4 to 16384"),
            (self.frame_len_max <= u32::MAX as usize, "frame_len_max must fit 32 bits"),
            (self.self_frames_max > 0, "self_frames_max must be positive"),
            (self.heartbeat_interval < self.peer_timeout, "heartbeat_interval must be below peer_timeout"),
            (!self.heartbeat_interval.is_zero(), "heartbeat_interval must be positive"),
            (self.qp_timeout <= 31 && self.qp_retry <= 7, "qp_timeout is 0 to 31, qp_retry 0 to 7"),
        ];
        match checks.iter().find(|(ok, _)| !ok) {
            Some((_, why)) => Err((*why).into()),
            None => Ok(()),
        }
    }
}

/// Why the transport could not be set up.
#[derive(Debug)]
#[non_exhaustive]
pub enum RdmaError {
    /// The options do not fit together.
    Options(String),
    /// Listening for handshakes failed.
    Bind { addr: String, reason: String },
    /// No RDMA device, or not the one asked for: the message says what was looked for and
    /// where (libibverbs, sysfs) and what to do instead.
    NoDevice(String),
    /// The device, its memory or its queue pairs.
    Device(String),
    /// The peer table does not fit this node or the cluster.
    Peers(String),
    /// A peer's handshake failed or did not come in time.
    Connect(String),
    /// The progress thread could not be started.
    Io(std::io::Error),
}

impl fmt::Display for RdmaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RdmaError::Options(w) => write!(f, "transport options: {w}"),
            RdmaError::Bind { addr, reason } => write!(f, "cannot listen on {addr}: {reason}"),
            RdmaError::NoDevice(w) => f.write_str(w),
            RdmaError::Device(w) => write!(f, "RDMA device: {w}"),
            RdmaError::Peers(w) => write!(f, "peer table: {w}"),
            RdmaError::Connect(w) => write!(f, "connecting queue pairs: {w}"),
            RdmaError::Io(e) => write!(f, "cannot start the transport's progress thread: {e}"),
        }
    }
}

impl std::error::Error for RdmaError {}

pub(crate) struct Shared {
    pub state: Mutex<State>,
}

pub(crate) fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding the lock is our bug; the state is still consistent enough to
    // report and shut down.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One node's end of the cluster over RDMA. See the crate docs.
pub struct RdmaTransport {
    me: NodeId,
    frame_len_max: usize,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    lent: Vec<Lent>,
    /// The time `poll_recv` sends a due heartbeat by.
    clock: progress::SparseClock,
}

impl RdmaTransport {
    /// Why `peer` failed, once it has.
    pub fn failure(&self, peer: NodeId) -> Option<String> {
        lock(&self.shared.state).peers.get(usize::from(peer.0)).and_then(|p| p.failure.clone())
    }

    /// The transport's counters.
    pub fn stats(&self) -> TransportCounters {
        lock(&self.shared.state).stats
    }

    /// A handle that stops this transport as a crash would (for fault tests): its queue
    /// pairs go to the error state without a goodbye, heartbeats stop, its own calls answer
    /// `Closed`.
    pub fn kill_switch(&self) -> KillSwitch {
        KillSwitch(self.shared.clone())
    }
}

/// Stops an [`RdmaTransport`] as a crash would; see [`RdmaTransport::kill_switch`].
#[derive(Clone)]
pub struct KillSwitch(Arc<Shared>);

impl KillSwitch {
    /// Stops the transport now.
    pub fn kill(&self) {
        let mut st = lock(&self.0.state);
        st.killed = true;
        for p in &st.peers {
            if let Some(qp) = &p.qp {
                qp.fail();
            }
        }
        if let Some(w) = &st.waker {
            w.wake_by_ref();
        }
    }
}

impl Transport for RdmaTransport {
    fn local_id(&self) -> NodeId {
        self.me
    }

    fn frame_len_max(&self) -> usize {
        self.frame_len_max
    }

    fn try_send(&mut self, to: NodeId, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), SendError> {
        let mut st = lock(&self.shared.state);
        let r = st.try_send(to, len, fill);
        let w = if st.wake && to == self.me { st.waker.clone() } else { None };
        drop(st);
        if let Some(w) = w {
            w.wake();
        }
        r
    }

    fn poll_recv(
        &mut self,
        max_frames: usize,
        sink: &mut dyn FnMut(NodeId, &[u8]),
    ) -> Result<usize, RecvError> {
        let mut lent = std::mem::take(&mut self.lent);
        {
            let mut st = lock(&self.shared.state);
            if st.closed || st.killed {
                return Err(RecvError::Closed);
            }
            progress::poll_cq(&mut st);
            st.heartbeat(self.clock.now());
            st.take(max_frames, &mut lent);
        }
        let n = lent.len();
        for l in &lent {
            match l {
                // SAFETY: `ptr..ptr + len` lies in a receive region (checked when the message
                // arrived), which the state owns and which outlives this call; the slot is not
                // posted again, nor the ring bytes freed to the peer, before `returned`, so
                // the NIC does not write these bytes while they are lent.
                Lent::Slot { peer, ptr, len, .. } => {
                    let f = unsafe { std::slice::from_raw_parts(*ptr, *len) };
                    sink(NodeId(*peer as u16), f);
                }
                Lent::Asm { peer, buf } => sink(NodeId(*peer as u16), buf),
                Lent::Own(f) => sink(self.me, f),
            }
        }
        if n > 0 {
            let mut st = lock(&self.shared.state);
            st.returned(&mut lent);
            // Credits the sink freed go back without waiting for the progress thread.
            for p in 0..st.peers.len() {
                if st.peers[p].write_wanted && p != usize::from(self.me.0) {
                    st.write_mailbox(p, false);
                }
            }
        }
        self.lent = lent;
        Ok(n)
    }

    fn poll_event(&mut self) -> Option<TransportEvent> {
        lock(&self.shared.state).events.pop_front()
    }

    fn register_waker(&mut self, waker: &Waker) {
        lock(&self.shared.state).waker = Some(waker.clone());
    }

    fn counters(&self) -> TransportCounters {
        self.stats()
    }

    fn close(&mut self) {
        lock(&self.shared.state).closed = true;
    }
}

impl Drop for RdmaTransport {
    fn drop(&mut self) {
        self.close();
        if let Some(t) = self.thread.take() {
            // The progress thread ends within `linger` of the close (twice, at worst: the
            // frames, then the goodbyes).
            let _ = t.join();
        }
    }
}

//! Sending: frames accepted into send slots, the send ring or the large buffer, posted as
//! credits allow, freed as their signalled completions come; and the mailbox writes.

use parma_core::transport::SendError;
use parma_core::NodeId;

use super::{wr_id, Link, Post, Ready, Sent, State, KIND_CHUNK, KIND_SEND, KIND_WRITE, MAILBOX_LEN};
use crate::ring::{self, IMM_LAST};
use crate::verbs::{SendOp, SendReq, POST_BATCH};
use crate::Wire;

impl State {
    pub fn try_send(
        &mut self,
        to: NodeId,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<(), SendError> {
        if self.closed || self.killed {
            return Err(SendError::Closed);
        }
        let to = usize::from(to.0);
        if to >= self.peers.len() {
            return Err(SendError::UnknownPeer);
        }
        if len > self.opts.frame_len_max {
            return Err(SendError::TooLarge);
        }
        let mut r = self.send_once(to, len, fill);
        if r == Err(SendError::WouldBlock) && to != self.me && self.peers[to].link == Link::Up {
            // The sender drives itself rather than wait for the progress thread: take
            // completions (they free slots), post what returned credits allow, try again.
            // Only then is it blocked: a completion after this point wakes it.
            crate::progress::poll_cq(self);
            self.pump(to);
            if self.peers[to].link == Link::Up {
                r = self.send_once(to, len, fill);
            }
        }
        match r {
            Ok(()) => {
                self.stats.frames_sent += 1;
                self.stats.bytes_sent += len as u64;
                if to != self.me && self.post_now(to) {
                    self.pump(to);
                }
            }
            Err(SendError::WouldBlock) => {
                self.stats.sends_blocked += 1;
                self.blocked = true;
            }
            Err(_) => {}
        }
        r
    }

    fn send_once(&mut self, to: usize, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), SendError> {
        if to == self.me {
            self.send_own(len, fill)
        } else if self.peers[to].link != Link::Up {
            Err(SendError::PeerFailed)
        } else if len > self.opts.inline_len_max() {
            self.send_large(to, len, fill)
        } else if self.opts.wire == Wire::Send {
            self.send_slot(to, len, fill)
        } else {
            self.send_ring(to, len, fill)
        }
    }

    fn send_own(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), SendError> {
        if self.own.len() >= self.opts.self_frames_max {
            return Err(SendError::WouldBlock);
        }
        let mut f = vec![0u8; len];
        fill(&mut f);
        self.own.push_back(f);
        self.ready.push_back(Ready::Own);
        self.wake = true;
        Ok(())
    }

    fn send_off(&self, peer: usize, slot: u32) -> usize {
        (peer * self.opts.send_slots + slot as usize) * self.opts.slot_len
    }

    fn send_slot(&mut self, to: usize, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), SendError> {
        let Some(slot) = self.peers[to].send_free.pop() else { return Err(SendError::WouldBlock) };
        let off = self.send_off(to, slot);
        fill(&mut self.send.bytes_mut()[off..off + len]);
        self.peers[to].queue.push_back(Post::Slot { slot, len: len as u32 });
        Ok(())
    }

    /// A frame, after its head, into the peer's send ring, where its bytes stay until the
    /// WRITE completes. It joins the frame queued before it when that one has not left yet
    /// and the two lie end to end ([`State::pack_limits`]): one WRITE then carries both. At
    /// most `send_slots` WRITEs wait for credits.
    fn send_ring(&mut self, to: usize, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), SendError> {
        let (bytes_max, frames_max) = self.pack_limits();
        let p = &mut self.peers[to];
        let rec = ring::PACK_HEAD + len;
        let Some((start, wrapped)) = p.tx.fits(rec, p.tx.tail) else { return Err(SendError::WouldBlock) };
        let joins = match p.queue.back() {
            Some(&Post::Ring { start: s, len: l, frames }) => {
                (frames as usize) < frames_max && p.tx.joins(s, l as usize, start, rec, wrapped, bytes_max)
            }
            _ => false,
        };
        if !joins && p.queue.len() >= self.opts.send_slots {
            return Err(SendError::WouldBlock);
        }
        p.tx.advance(start, rec);
        let off = to * self.opts.ring_len + p.tx.off(start);
        let bytes = &mut self.send.bytes_mut()[off..off + rec];
        bytes[..ring::PACK_HEAD].copy_from_slice(&ring::head(len));
        fill(&mut bytes[ring::PACK_HEAD..]);
        match p.queue.back_mut() {
            Some(Post::Ring { len: l, frames, .. }) if joins => {
                *l += rec as u32;
                *frames += 1;
            }
            _ => p.queue.push_back(Post::Ring { start, len: rec as u32, frames: 1 }),
        }
        Ok(())
    }

    /// The most bytes and frames one packed WRITE carries: 64 KiB and 64 frames, or less
    /// for a small ring (a quarter of its bytes and of its records).
    fn pack_limits(&self) -> (usize, usize) {
        ((self.opts.ring_len / 4).min(64 << 10), (self.opts.ring_msgs / 4).clamp(1, 64))
    }

    fn send_large(
        &mut self,
        to: usize,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<(), SendError> {
        let p = &mut self.peers[to];
        if p.large_chunks_left > 0 {
            return Err(SendError::WouldBlock);
        }
        if p.large.as_ref().is_none_or(|r| r.bytes().len() < len) {
            // Grown in powers of two up to `frame_len_max`, registered once per size.
            let want = len.next_power_of_two().min(self.opts.frame_len_max).max(len);
            p.large = None;
            match self.dev.region(want) {
                Ok(r) => p.large = Some(r),
                Err(_) => return Err(SendError::WouldBlock),
            }
        }
        let Some(large) = p.large.as_mut() else { return Err(SendError::WouldBlock) };
        fill(&mut large.bytes_mut()[..len]);
        let l = self.opts.chunk_len();
        let chunks = len.div_ceil(l);
        for c in 0..chunks {
            let off = c * l;
            let n = l.min(len - off);
            p.queue.push_back(Post::Chunk { off: off as u32, len: n as u32, last: c + 1 == chunks });
        }
        p.large_chunks_left = chunks as u32;
        Ok(())
    }

    /// Whether a frame just accepted is posted at once: always with [`Wire::Send`]; with
    /// [`Wire::Ring`] while fewer than `batch_above_inflight` sends are in flight (nothing
    /// waits), else it waits to go with others in one list (one doorbell: on Soft-RoCE one
    /// system call and one run of the requester) at the next completion, progress step or
    /// full batch. A signalled send is in flight then, or the progress thread posts it.
    fn post_now(&self, to: usize) -> bool {
        let p = &self.peers[to];
        let above = self.opts.batch_above_inflight;
        self.opts.wire == Wire::Send
            || above == 0
            || p.log.inflight.len() < above
            || p.queue.len() >= POST_BATCH
    }

    /// Messages (and, [`Wire::Ring`], the position before which ring bytes are free) the
    /// peer granted.
    fn credits(&self, peer: usize) -> Result<(u64, u64), String> {
        let freed = self.mailbox.read_u64(peer * MAILBOX_LEN);
        let bytes_freed = self.mailbox.read_u64(peer * MAILBOX_LEN + 24);
        let p = &self.peers[peer];
        if freed > p.sent_msgs {
            return Err(format!("it freed {freed} messages of {} sent", p.sent_msgs));
        }
        if bytes_freed > p.remote.head {
            return Err(format!("it freed {bytes_freed} ring bytes of {} written", p.remote.head));
        }
        let window = match self.opts.wire {
            Wire::Send => self.opts.recv_slots,
            Wire::Ring => self.opts.ring_msgs,
        };
        Ok(((window as u64).saturating_sub(p.sent_msgs - freed), bytes_freed))
    }

    /// One send work request in this many is signalled (and any that must be, see
    /// [`State::pump`]); a signalled completion frees every send before it.
    fn signal_every(&self) -> u32 {
        (self.opts.send_slots as u32 / 4).clamp(1, 16)
    }

    /// Posts the peer's queued sends as far as credits and the send queue allow, as linked
    /// lists of up to [`POST_BATCH`] work requests (one doorbell each).
    ///
    /// Only some are signalled: one in [`State::signal_every`], the last chunk of a long
    /// frame, the one that fills the send queue, a slot's send while fewer than
    /// `signal_every` send slots are free (so always when none is), and a ring frame that
    /// empties the queue. So whenever `try_send` answers `WouldBlock` a signalled send is
    /// posted (or queued) after every unsignalled one, and its completion frees them all. A
    /// failed work request completes whether signalled or not, and fails the peer as before.
    pub fn pump(&mut self, peer: usize) {
        let (mut credits, bytes_freed) = match self.credits(peer) {
            Ok(c) => c,
            Err(e) => return self.fail(peer, format!("bad credit return: {e}")),
        };
        let sq_max = self.opts.send_wr_max() as usize - 1; // one kept for the mailbox write
        let every = self.signal_every();
        let (slot_len, send_slots, ring_len) = (self.opts.slot_len, self.opts.send_slots, self.opts.ring_len);
        let wire = self.opts.wire;
        loop {
            let p = &mut self.peers[peer];
            let Some(qp) = &p.qp else { return };
            let (ring_addr, ring_rkey) = p.remote_ring;
            let mut reqs = Vec::new();
            let mut bytes = 0u64;
            while credits > 0
                && reqs.len() < POST_BATCH
                && p.link == Link::Up
                && p.log.inflight.len() < sq_max
            {
                let Some(&post) = p.queue.front() else { break };
                let must = p.log.unsignalled + 1 >= every || p.log.inflight.len() + 1 >= sq_max;
                let (len, last, msgs) = match post {
                    Post::Slot { len, .. } => (len, true, 1),
                    Post::Ring { len, frames, .. } => (len, true, u64::from(frames)),
                    Post::Chunk { len, last, .. } => (len, last, 1),
                };
                if msgs > credits {
                    break;
                }
                let (region, off, what, signalled) = match post {
                    Post::Slot { slot, .. } => {
                        let off = (peer * send_slots + slot as usize) * slot_len;
                        // Few slots left: each send is signalled, so that slots come back
                        // as soon as they can (with none left, the one that must).
                        let scarce = p.send_free.len() < every as usize;
                        (&self.send, off, Sent::Slot(slot), must || scarce)
                    }
                    Post::Ring { start, len, .. } => {
                        let off = peer * ring_len + p.tx.off(start);
                        // The last queued: signalled, so that a sender the ring turns away
                        // always has a completion coming.
                        let end = start + u64::from(len);
                        (&self.send, off, Sent::Ring(end), must || p.queue.len() == 1)
                    }
                    Post::Chunk { off, last, .. } => {
                        let Some(large) = &p.large else { break }; // queued with the buffer
                        (large, off as usize, Sent::Chunk, must || last)
                    }
                };
                // Where the message goes: the peer's next slot, or its ring if it has room (the
                // last check that can stop this send).
                let op = match wire {
                    Wire::Send => SendOp::SendImm(if last { IMM_LAST } else { 0 }),
                    Wire::Ring => {
                        let Some((at, wrapped)) = p.remote.fits(len as usize, bytes_freed) else { break };
                        p.remote.advance(at, len as usize);
                        let remote_addr = ring_addr + p.remote.off(at) as u64;
                        let imm = match post {
                            Post::Ring { .. } => ring::packed_imm(len, wrapped),
                            _ => ring::imm(len, wrapped, last),
                        };
                        SendOp::WriteImm { remote_addr, rkey: ring_rkey, imm }
                    }
                };
                p.queue.pop_front();
                let kind = if matches!(what, Sent::Chunk) { KIND_CHUNK } else { KIND_SEND };
                let seq = p.log.record(what, signalled);
                let wr_id = wr_id(peer, kind, seq);
                reqs.push(SendReq { region, off, len: len as usize, op, wr_id, signalled });
                p.sent_msgs += msgs;
                credits -= msgs;
                bytes += u64::from(len);
            }
            let n = reqs.len();
            if n == 0 {
                return;
            }
            if let Err(e) = qp.post_sends(&reqs) {
                return self.fail(peer, format!("posting a send failed: {e}"));
            }
            self.stats.packets_sent += n as u64;
            self.stats.wire_bytes_sent += bytes;
            if self.blocked && wire == Wire::Ring {
                // Frames left the queue: a sender it turned away may try again.
                self.blocked = false;
                self.wake = true;
            }
            if n < POST_BATCH {
                return;
            }
        }
    }

    /// The signalled send work request `seq` of `peer` completed (or was flushed): it and
    /// every send before it are done. Frees their slots or send-ring bytes, the long frame's
    /// buffer, the mailbox write.
    pub fn send_done(&mut self, peer: usize, seq: u32) {
        let p = &mut self.peers[peer];
        let Some(&(first, _)) = p.log.inflight.front() else { return };
        let count = (seq.wrapping_sub(first) as usize + 1).min(p.log.inflight.len());
        let mut frees = false;
        for (_, what) in p.log.inflight.drain(..count) {
            match what {
                Sent::Slot(slot) => {
                    p.send_free.push(slot);
                    frees = true;
                }
                Sent::Ring(end) => {
                    p.tx.tail = end;
                    frees = true;
                }
                Sent::Chunk => {
                    p.large_chunks_left = p.large_chunks_left.saturating_sub(1);
                    frees = true;
                }
                Sent::Write => p.write_busy = false,
            }
        }
        if self.blocked && frees {
            self.blocked = false;
            self.wake = true;
        }
    }

    /// Writes this node's freed counts, heartbeat and goodbye into the peer's mailbox, unless
    /// a write is already in flight (then it goes when that one completes). Always
    /// signalled: its completion ends `write_busy`.
    pub fn write_mailbox(&mut self, peer: usize, goodbye: bool) {
        // The goodbye word: 0 none; 1 a goodbye; 2 + n a goodbye naming node n as the first
        // peer this node lost.
        let bye = if goodbye { 1 + self.first_lost.map_or(0, |n| n as u64 + 1) } else { 0 };
        let p = &mut self.peers[peer];
        if p.write_busy || p.link == Link::Failed {
            p.write_wanted |= p.write_busy;
            return;
        }
        let Some(qp) = &p.qp else { return };
        let off = peer * MAILBOX_LEN;
        let b = &mut self.outbox.bytes_mut()[off..off + MAILBOX_LEN];
        b[..8].copy_from_slice(&p.freed.to_le_bytes());
        b[8..16].copy_from_slice(&p.beat.to_le_bytes());
        b[16..24].copy_from_slice(&bye.to_le_bytes());
        b[24..32].copy_from_slice(&p.rx.tail.to_le_bytes());
        let (remote_addr, rkey) = p.remote_mailbox;
        let seq = p.log.next_seq;
        let req = SendReq {
            region: &self.outbox,
            off,
            len: MAILBOX_LEN,
            op: SendOp::Write { remote_addr, rkey },
            wr_id: wr_id(peer, KIND_WRITE, seq),
            signalled: true,
        };
        match qp.post_sends(&[req]) {
            Ok(()) => {
                p.log.record(Sent::Write, true);
                p.write_busy = true;
                p.write_wanted = false;
                p.freed_reported = p.freed;
                p.bytes_reported = p.rx.tail;
                self.stats.packets_sent += 1;
                self.stats.wire_bytes_sent += MAILBOX_LEN as u64;
            }
            Err(e) => self.fail(peer, format!("posting a mailbox write failed: {e}")),
        }
    }
}

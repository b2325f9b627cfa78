//! Receiving: messages that arrived, taken apart into frames in order, and their slots or
//! ring bytes freed (which returns the peer's credits).

use super::{Link, Msg, Ready, State, KIND_RECV};
use crate::ring::{IMM_LAST, IMM_PACKED};
use crate::state::wr_id;
use crate::Wire;

impl State {
    fn recv_off(&self, peer: usize, slot: u32) -> usize {
        (peer * self.opts.recv_slots + slot as usize) * self.opts.slot_len
    }

    /// Posts receive `index` of `peer` (again): slot `index` ([`Wire::Send`]), or an empty
    /// receive for a WRITE's immediate data ([`Wire::Ring`]).
    pub fn post_recv(&mut self, peer: usize, index: u32) -> Result<(), String> {
        let Some(qp) = &self.peers[peer].qp else { return Ok(()) };
        let id = wr_id(peer, KIND_RECV, index);
        let r = match self.opts.wire {
            Wire::Send => qp.post_recv(&self.recv, self.recv_off(peer, index), self.opts.slot_len, id),
            Wire::Ring => qp.post_recv_empty(id),
        };
        r.map_err(|e| e.to_string())
    }

    /// A message was taken apart (its bytes are no longer needed): post its slot again
    /// ([`Wire::Send`]) or free its ring bytes ([`Wire::Ring`]), and count it for the peer's
    /// credits, returned once a quarter of the window is free.
    pub(super) fn free_msg(&mut self, peer: usize, id: u64) {
        if self.peers[peer].link == Link::Failed {
            return;
        }
        let (msgs, bytes) = match self.opts.wire {
            Wire::Send => {
                if let Err(e) = self.post_recv(peer, id as u32) {
                    return self.fail(peer, format!("posting a receive failed: {e}"));
                }
                self.peers[peer].freed += 1;
                (self.opts.recv_slots as u64, u64::MAX)
            }
            Wire::Ring => {
                let p = &mut self.peers[peer];
                p.rx.release(id);
                p.freed = p.rx.freed;
                (self.opts.ring_msgs as u64, self.opts.ring_len as u64)
            }
        };
        let p = &mut self.peers[peer];
        if p.freed - p.freed_reported >= (msgs / 4).max(1) || p.rx.tail - p.bytes_reported >= bytes / 4 {
            p.write_wanted = true;
        }
    }

    /// A receive of `peer` completed: into slot `index` with `len` bytes ([`Wire::Send`]), or
    /// for a WRITE into the peer's ring ([`Wire::Ring`]); `imm` is its immediate data.
    pub fn arrived(&mut self, peer: usize, index: u32, len: usize, imm: Option<u32>) {
        let p = &mut self.peers[peer];
        if p.link == Link::Failed {
            return;
        }
        p.heard = true;
        let msg = match (self.opts.wire, imm) {
            (Wire::Send, Some(IMM_LAST)) => Msg { id: index.into(), off: 0, len: len as u32, last: true },
            (Wire::Send, Some(0)) => Msg { id: index.into(), off: 0, len: len as u32, last: false },
            (Wire::Ring, Some(imm)) => {
                // The receive held nothing; it goes back at once (the records' credits
                // bound how many are in use).
                if let Err(e) = self.post_recv(peer, index) {
                    return self.fail(peer, format!("posting a receive failed: {e}"));
                }
                if imm & IMM_PACKED != 0 {
                    // Whole frames, one WRITE: each a record of its own.
                    let p = &mut self.peers[peer];
                    let backlog = &mut p.backlog;
                    let r = p.rx.arrive_packed(imm, self.rings[peer].bytes(), |r| {
                        backlog.push_back(Msg { id: r.seq, off: r.off, len: r.len as u32, last: true })
                    });
                    if let Err(e) = r {
                        return self.fail(peer, format!("a broken ring record: {e}"));
                    }
                    return self.advance(peer);
                }
                match self.peers[peer].rx.arrive(imm) {
                    Ok(r) => Msg { id: r.seq, off: r.off, len: r.len as u32, last: r.last },
                    Err(e) => return self.fail(peer, format!("a broken ring record: {e}")),
                }
            }
            (_, other) => return self.fail(peer, format!("a message with immediate data {other:?}")),
        };
        let off = match self.opts.wire {
            Wire::Send => self.recv_off(peer, index),
            Wire::Ring => msg.off,
        };
        self.peers[peer].backlog.push_back(Msg { off, ..msg });
        self.advance(peer);
    }

    /// Takes the peer's arrived messages apart, in order, as far as its reassembly buffer
    /// allows.
    pub(super) fn advance(&mut self, peer: usize) {
        while let Some(&m) = self.peers[peer].backlog.front() {
            let p = &self.peers[peer];
            if m.last && !p.asm_open {
                self.ready.push_back(Ready::Slot { peer, id: m.id, off: m.off, len: m.len });
                self.peers[peer].backlog.pop_front();
                self.wake = true;
                continue;
            }
            if p.asm_done {
                break; // the previous long frame is not taken yet
            }
            if p.asm.len() + m.len as usize > self.opts.frame_len_max {
                return self.fail(peer, "a frame longer than frame_len_max".into());
            }
            // Fields, not `recv_bytes`: the peer is borrowed mutably beside them.
            let region = match self.opts.wire {
                Wire::Send => &self.recv,
                Wire::Ring => &self.rings[peer],
            };
            let bytes = &region.bytes()[m.off..m.off + m.len as usize];
            let p = &mut self.peers[peer];
            p.asm.extend_from_slice(bytes);
            p.asm_open = !m.last;
            p.backlog.pop_front();
            if m.last {
                p.asm_done = true;
                self.ready.push_back(Ready::Asm { peer });
                self.wake = true;
            }
            self.free_msg(peer, m.id);
        }
    }

    /// The peer said goodbye: its frames so far are handed out, then it counts as failed.
    pub fn leaving(&mut self, peer: usize, named: Option<usize>) {
        if self.peers[peer].link == Link::Up {
            self.peers[peer].link = Link::Leaving;
            self.ready.push_back(Ready::Gone { peer, named });
            self.wake = true;
        }
    }
}

//! Byte rings for [`crate::Wire::Ring`]: where a record goes, what a peer's immediate data
//! may say, and which bytes are free again. Pure arithmetic, no verbs: every check on what a
//! peer wrote is here, with its tests.
//!
//! Positions count bytes from the start of the ring's life and never wrap (u64); the offset
//! in the ring is `position % cap`. A record never crosses the ring's end: one that would is
//! placed at the start of the next lap, and the bytes it skips count as used until it is
//! freed. Both ends apply the same rule, so the immediate data carries only the record's
//! length and whether it skipped (`IMM_WRAP`); the receiver checks both against its own
//! position.
//!
//! A whole frame goes into the ring as a record with a head of its own ([`PACK_HEAD`]
//! bytes: the frame's length), so that frames waiting together can leave in one WRITE: its
//! immediate data says `IMM_PACKED` and the length of all of them, and the receiver walks
//! the heads ([`RecvRing::arrive_packed`]). A chunk of a long frame has no head: its
//! WRITE's immediate data is its length, and `IMM_LAST` marks the frame's last.

use std::collections::VecDeque;

/// Immediate data: the last (or only) message of a frame.
pub(crate) const IMM_LAST: u32 = 1 << 31;
/// Immediate data (ring): the record starts at the next lap, skipping the ring's end.
pub(crate) const IMM_WRAP: u32 = 1 << 30;
/// Immediate data (ring): the WRITE holds whole frames, each after its head.
pub(crate) const IMM_PACKED: u32 = 1 << 29;
/// Immediate data (ring): the bits that hold the WRITE's length.
pub(crate) const IMM_LEN: u32 = IMM_PACKED - 1;
/// Bytes of a whole frame's head in the ring: its length, a little-endian `u32`.
pub(crate) const PACK_HEAD: usize = 4;

/// Where a record of `len` bytes goes when the ring's next free position is `head`: at
/// `head`, or (`true`) at the start of the next lap when it would cross the ring's end.
pub(crate) fn place(head: u64, cap: u64, len: u64) -> (u64, bool) {
    let off = head % cap;
    if off + len > cap {
        (head - off + cap, true)
    } else {
        (head, false)
    }
}

/// The immediate data of a record of `len` bytes (at most `IMM_LEN`).
pub(crate) fn imm(len: u32, wrapped: bool, last: bool) -> u32 {
    debug_assert!(len <= IMM_LEN);
    (len & IMM_LEN) | if wrapped { IMM_WRAP } else { 0 } | if last { IMM_LAST } else { 0 }
}

/// The immediate data of a packed WRITE of `len` bytes (whole frames, each after its head).
pub(crate) fn packed_imm(len: u32, wrapped: bool) -> u32 {
    imm(len, wrapped, false) | IMM_PACKED
}

/// A whole frame's head: its length.
pub(crate) fn head(len: usize) -> [u8; PACK_HEAD] {
    (len as u32).to_le_bytes()
}

/// The frame length in the head at `at`, if a whole head lies between `at` and `end`.
fn read_head(ring: &[u8], at: usize, end: usize) -> Option<usize> {
    if end < at + PACK_HEAD {
        return None;
    }
    let h = ring.get(at..at + PACK_HEAD)?;
    Some(u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize)
}

/// A ring this node writes into (the sender's registered copy, or its account of the peer's
/// ring): records are placed at `head`, and bytes before `tail` are free again.
#[derive(Debug)]
pub(crate) struct SendRing {
    pub cap: u64,
    pub head: u64,
    pub tail: u64,
}

impl SendRing {
    pub fn new(cap: usize) -> SendRing {
        SendRing { cap: cap as u64, head: 0, tail: 0 }
    }

    /// Where a record of `len` bytes would start, and whether it skips the end, if it fits in
    /// the free bytes now (`tail` as given: the receiver's freed count for a remote ring).
    pub fn fits(&self, len: usize, tail: u64) -> Option<(u64, bool)> {
        let (start, wrapped) = place(self.head, self.cap, len as u64);
        (start + len as u64 - tail <= self.cap).then_some((start, wrapped))
    }

    /// Whether a record of `rec` bytes that `fits` placed at `start` (skipping the end or
    /// not: `wrapped`) may join the pack of `pack_len` bytes from `pack_start`, all of it one
    /// WRITE: it follows the pack directly in the same lap (a record that skips the end, or
    /// starts the next lap right at it, starts a WRITE of its own) within `bytes_max`.
    pub fn joins(
        &self,
        pack_start: u64,
        pack_len: usize,
        start: u64,
        rec: usize,
        wrapped: bool,
        bytes_max: usize,
    ) -> bool {
        !wrapped
            && pack_start + pack_len as u64 == start
            && self.off(pack_start) + pack_len + rec <= self.cap as usize
            && pack_len + rec <= bytes_max
    }

    /// Takes the bytes `fits` found: the next record goes after them.
    pub fn advance(&mut self, start: u64, len: usize) {
        debug_assert!(start >= self.head);
        self.head = start + len as u64;
    }

    /// The offset in the ring of position `pos`.
    pub fn off(&self, pos: u64) -> usize {
        (pos % self.cap) as usize
    }
}

/// A record that arrived in a receive ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    /// Its number, to free it with [`RecvRing::release`].
    pub seq: u64,
    /// Its offset in the ring.
    pub off: usize,
    pub len: usize,
    pub last: bool,
}

/// A ring a peer writes into: this node's account of where the peer's records are, which of
/// them are still in use, and how far the peer may write.
#[derive(Debug)]
pub(crate) struct RecvRing {
    cap: u64,
    /// Where the next record starts (before any skip).
    head: u64,
    /// Every byte before it is free: the peer may write up to `tail + cap`.
    pub tail: u64,
    /// Records arrived and not yet freed, oldest first: (end position, freed).
    held: VecDeque<(u64, bool)>,
    /// The number of `held[0]`.
    base: u64,
    /// Most records held at once (the peer's message credits).
    held_max: usize,
    /// Records freed in order: what the peer's message credits are counted from.
    pub freed: u64,
}

impl RecvRing {
    pub fn new(cap: usize, held_max: usize) -> RecvRing {
        RecvRing { cap: cap as u64, head: 0, tail: 0, held: VecDeque::new(), base: 0, held_max, freed: 0 }
    }

    /// Checks a record's immediate data against this ring and takes it in; an error names
    /// what the peer broke, and the ring is then unchanged. A record of more than half the
    /// ring, one that crosses the end, a skip that was not needed, bytes past what the peer
    /// was allowed to write, and more records than its credits are all refused.
    pub fn arrive(&mut self, imm: u32) -> Result<Record, String> {
        let len = u64::from(imm & IMM_LEN);
        let wrapped = imm & IMM_WRAP != 0;
        if imm & IMM_PACKED != 0 {
            return Err(format!("immediate data {imm:#x} is a packed write's"));
        }
        let start = self.check_place(len, wrapped)?;
        let end = start + len;
        if self.held.len() >= self.held_max {
            return Err(format!("more than {} records unfreed", self.held_max));
        }
        self.head = end;
        self.held.push_back((end, false));
        let seq = self.base + self.held.len() as u64 - 1;
        Ok(Record { seq, off: (start % self.cap) as usize, len: len as usize, last: imm & IMM_LAST != 0 })
    }

    /// Checks a packed WRITE (`IMM_PACKED`: whole frames, each after its head) against this
    /// ring, the heads read from `ring` (this ring's bytes, where the WRITE landed), and takes
    /// its frames in as records, calling `each` for each in order. The WRITE's placement is
    /// checked as [`RecvRing::arrive`] checks a record's; then its heads must tile it exactly,
    /// and the frames must fit the peer's credits. On an error nothing was taken in and `each`
    /// was not called.
    pub fn arrive_packed(
        &mut self,
        imm: u32,
        ring: &[u8],
        mut each: impl FnMut(Record),
    ) -> Result<(), String> {
        let len = u64::from(imm & IMM_LEN);
        let wrapped = imm & IMM_WRAP != 0;
        if imm & IMM_PACKED == 0 || imm & IMM_LAST != 0 {
            return Err(format!("immediate data {imm:#x} is not a packed write's"));
        }
        if ring.len() as u64 != self.cap {
            return Err(format!("a ring of {} bytes read as one of {}", ring.len(), self.cap));
        }
        let start = self.check_place(len, wrapped)?;
        let (off, end) = ((start % self.cap) as usize, (start % self.cap + len) as usize);
        // First the heads, changing nothing.
        let (mut at, mut frames) = (off, 0usize);
        while at < end {
            let Some(n) = read_head(ring, at, end) else {
                return Err(format!("a packed write of {len} bytes ends inside a frame's head"));
            };
            if n > end - at - PACK_HEAD {
                return Err(format!("a frame of {n} bytes in a packed write of {len}"));
            }
            at += PACK_HEAD + n;
            frames += 1;
        }
        if frames == 0 {
            return Err("an empty packed write".into());
        }
        if self.held.len() + frames > self.held_max {
            return Err(format!("more than {} records unfreed", self.held_max));
        }
        // Then the records.
        let mut at = off;
        while at < end {
            let n = read_head(ring, at, end).unwrap_or(0); // checked above
            let rec_end = start + (at - off + PACK_HEAD + n) as u64;
            self.held.push_back((rec_end, false));
            let seq = self.base + self.held.len() as u64 - 1;
            each(Record { seq, off: at + PACK_HEAD, len: n, last: true });
            at += PACK_HEAD + n;
        }
        self.head = start + len;
        Ok(())
    }

    /// Where a record (or packed write) of `len` bytes that skipped the ring's end or not
    /// (`wrapped`) starts, if the peer may write it there.
    fn check_place(&self, len: u64, wrapped: bool) -> Result<u64, String> {
        if len > self.cap / 2 {
            return Err(format!("a record of {len} bytes in a ring of {}", self.cap));
        }
        let (start, must_wrap) = place(self.head, self.cap, len);
        if wrapped != must_wrap {
            let at = self.head % self.cap;
            return Err(format!(
                "a record of {len} bytes at offset {at} of {} with the skip flag {}",
                self.cap,
                if wrapped { "set" } else { "clear" }
            ));
        }
        let end = start + len;
        if end - self.tail > self.cap {
            return Err(format!("it wrote {} bytes past what the ring had free", end - self.tail - self.cap));
        }
        Ok(start)
    }

    /// Frees record `seq`; the ring's free bytes and `freed` grow once every record before
    /// it is free too. Returns how many records that freed.
    pub fn release(&mut self, seq: u64) -> u64 {
        let Some(i) = seq.checked_sub(self.base).and_then(|i| usize::try_from(i).ok()) else { return 0 };
        if let Some(e) = self.held.get_mut(i) {
            e.1 = true;
        }
        let mut n = 0;
        while let Some(&(end, true)) = self.held.front() {
            self.held.pop_front();
            self.base += 1;
            self.tail = end;
            n += 1;
        }
        self.freed += n;
        n
    }

    /// Records held (arrived, not yet freed).
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
#[path = "ring_tests.rs"]
mod tests;

//! What the node's peers send it in the `node_ops` target: plausible messages, and plausible
//! answers to what the node sent last.

use super::*;

impl Harness {
    pub(super) fn req(&self, x: u8) -> RequestId {
        if x >= 0xf0 {
            RequestId(u64::from(x & 0x0f))
        } else {
            RequestId(self.reqs.saturating_sub(u64::from(x % 4)))
        }
    }

    pub(super) fn keys(&self, b: &mut Bytes<'_>) -> Vec<Key> {
        let n = b.u8() % 6;
        (0..n).map(|_| small_key(b.u8())).collect()
    }

    /// Values for `keys`, of the right length unless `shape` says otherwise.
    pub(super) fn values_for(&self, keys: &[Key], shape: u8) -> Vec<f32> {
        let n = self.cfg.layout.total_len(keys).unwrap_or(keys.len() * LEN);
        let n = if shape >= 0xf8 { n + 1 } else { n };
        (0..n).map(|i| f32::from(shape.wrapping_add(i as u8) % 8)).collect()
    }

    pub(super) fn homed_key(&self, x: u8) -> Key {
        if x >= 0xf8 {
            small_key(x)
        } else {
            self.homed[usize::from(x) % self.homed.len()]
        }
    }

    pub(super) fn plausible(&self, b: &mut Bytes<'_>) -> Message {
        let sel = b.u8();
        match sel % 11 {
            0 => Message::Pull {
                req: self.req(b.u8()),
                origin: origin(b.u8()),
                hops: hops(b.u8()),
                keys: self.keys(b),
            },
            1 => {
                let req = self.req(b.u8());
                let keys = self.keys(b);
                Message::PullReply { req, values: self.values_for(&keys, b.u8()), keys }
            }
            2 => {
                let (req, origin, hops) = (self.req(b.u8()), origin(b.u8()), hops(b.u8()));
                let write = if b.u8() & 1 == 0 { WriteKind::Add } else { WriteKind::Set };
                let keys = self.keys(b);
                Message::Push { req, origin, hops, write, values: self.values_for(&keys, b.u8()), keys }
            }
            3 => Message::PushReply { req: self.req(b.u8()), keys: self.keys(b) },
            4 => Message::Localize { origin: origin(b.u8()), hops: hops(b.u8()), keys: self.keys(b) },
            5 => {
                let n = b.u8() % 5;
                let moved: Vec<Moved> = (0..n)
                    .map(|_| Moved {
                        key: small_key(b.u8()),
                        epoch: Epoch(u32::from(b.u8() % 8)),
                        version: Version(u64::from(b.u8())),
                    })
                    .collect();
                let keys: Vec<Key> = moved.iter().map(|m| m.key).collect();
                Message::Relocate { values: self.values_for(&keys, b.u8()), moved }
            }
            6 => {
                let n = b.u8() % 5;
                let changes = (0..n)
                    .map(|_| OwnerChange {
                        key: self.homed_key(b.u8()),
                        epoch: Epoch(u32::from(b.u8() % 8)),
                        prev: origin(b.u8()),
                    })
                    .collect();
                Message::OwnerUpdate { changes }
            }
            7 => {
                let n = b.u8() % 5;
                let released = (0..n)
                    .map(|_| Release { key: small_key(b.u8()), epoch: Epoch(u32::from(b.u8() % 8)) })
                    .collect();
                Message::PointerRelease { released }
            }
            8 => {
                let reason = match b.u8() % 3 {
                    0 => FailReason::RoutingLoop,
                    1 => FailReason::Busy,
                    _ => FailReason::Unreachable { node: peer(b.u8()) },
                };
                Message::RequestFailed { req: self.req(b.u8()), reason, keys: self.keys(b) }
            }
            9 => Message::BarrierEnter { generation: u64::from(b.u8() % 4) },
            // A peer's flushed clock (small, or every worker retired), instead of a release in
            // one of four.
            _ if sel & 0x30 == 0x30 => {
                let x = b.u8();
                Message::Flushed { clock: if x == 0xff { u64::MAX } else { u64::from(x % 16) } }
            }
            // SparseSSP: a peer asks about keys, or answers a query (the node's last few, or
            // one it never asked), instead of a release in one of eight.
            _ if sel & 0xf0 == 0x20 => {
                let (query, below) = (u64::from(b.u8() % 8), u64::from(b.u8() % 16));
                Message::Speculate { query, below, keys: self.keys(b) }
            }
            _ if sel & 0xf0 == 0x60 => {
                Message::SpeculateReply { query: u64::from(b.u8() % 8), clear: b.u8() & 1 == 1 }
            }
            _ => Message::BarrierRelease { generation: u64::from(b.u8() % 4) },
        }
    }

    /// What a peer might send back after the node sent it one of its recent messages.
    pub(super) fn answer(&self, idx: usize, twist: u8, b: &mut Bytes<'_>) -> Option<(NodeId, Message)> {
        if self.recent.is_empty() {
            return None;
        }
        let (to, msg) = &self.recent[idx % self.recent.len()];
        let to = *to;
        // Some answers name only some of the keys.
        let some = |keys: &[Key]| -> Vec<Key> {
            if twist & 0x20 == 0 {
                keys.to_vec()
            } else {
                keys.iter()
                    .copied()
                    .enumerate()
                    .filter(|(i, _)| (twist >> (i % 5)) & 1 == 0)
                    .map(|(_, k)| k)
                    .collect()
            }
        };
        let back = twist & 0x40 != 0;
        let epoch = Epoch(u32::from(b.u8() % 8));
        Some(match msg {
            Message::Pull { req, origin, hops, keys } if back => (
                to,
                Message::Pull {
                    req: *req,
                    origin: *origin,
                    hops: hops.saturating_add(1),
                    keys: keys.clone(),
                },
            ),
            Message::Pull { req, keys, .. } => {
                let keys = some(keys);
                (to, Message::PullReply { req: *req, values: self.values_for(&keys, b.u8()), keys })
            }
            Message::Push { req, origin, hops, write, keys, values } if back => {
                let msg = Message::Push {
                    req: *req,
                    origin: *origin,
                    hops: hops.saturating_add(1),
                    write: *write,
                    keys: keys.clone(),
                    values: values.clone(),
                };
                (to, msg)
            }
            Message::Push { req, keys, .. } => (to, Message::PushReply { req: *req, keys: some(keys) }),
            Message::Localize { origin, hops, keys } if back || *origin != ME => {
                (to, Message::Localize { origin: *origin, hops: hops.saturating_add(1), keys: keys.clone() })
            }
            Message::Localize { keys, .. } => {
                let keys = some(keys);
                let moved = keys.iter().map(|k| Moved { key: *k, epoch, version: Version(u64::from(twist)) });
                (to, Message::Relocate { moved: moved.collect(), values: self.values_for(&keys, b.u8()) })
            }
            Message::Relocate { moved, values } if back => {
                // The new owner hands the keys back (someone here asked for them again).
                let moved = moved.iter().map(|m| Moved { epoch: m.epoch.next(), ..*m }).collect();
                (to, Message::Relocate { moved, values: values.clone() })
            }
            Message::Relocate { moved, .. } => {
                // The home node confirms the move.
                let released: Vec<Release> =
                    moved.iter().map(|m| Release { key: m.key, epoch: m.epoch }).collect();
                let home = moved.first().map(|m| self.home(m.key)).filter(|h| *h != ME).unwrap_or(to);
                (home, Message::PointerRelease { released })
            }
            Message::OwnerUpdate { changes } => {
                // Someone else wants the keys the node just got.
                let keys = changes.iter().map(|c| c.key).collect();
                (to, Message::Localize { origin: if back { NodeId(0) } else { NodeId(2) }, hops: 1, keys })
            }
            Message::PullReply { keys, .. } | Message::PushReply { keys, .. } => {
                (to, Message::Localize { origin: to, hops: 0, keys: some(keys) })
            }
            Message::RequestFailed { req, keys, .. } => {
                (to, Message::Pull { req: *req, origin: to, hops: 0, keys: keys.clone() })
            }
            Message::BarrierEnter { generation } => {
                (NodeId(0), Message::BarrierRelease { generation: *generation })
            }
            Message::PointerRelease { released } => {
                let keys = released.iter().map(|r| r.key).collect();
                (to, Message::Pull { req: RequestId(u64::from(twist)), origin: to, hops: 0, keys })
            }
            Message::Speculate { query, .. } => (to, Message::SpeculateReply { query: *query, clear: !back }),
            _ => return None,
        })
    }
}

/// The sender of a frame: a peer, now and then a node outside the cluster.
pub(super) fn peer(x: u8) -> NodeId {
    match x % 4 {
        0 | 2 => NodeId(0),
        1 => NodeId(2),
        _ if x >= 0xf0 => NodeId(u16::from(x & 0x0f) + NODES),
        _ => NodeId(2),
    }
}

/// An origin in a message: any node of the cluster (this one included), now and then none.
pub(super) fn origin(x: u8) -> NodeId {
    if x >= 0xfc {
        NodeId(NODES + u16::from(x & 3))
    } else {
        NodeId(u16::from(x % 3))
    }
}

/// A hop count: small, or at the limit.
pub(super) fn hops(x: u8) -> u8 {
    if x >= 0xf0 {
        HOPS_MAX - 1 + (x & 1)
    } else {
        x % 4
    }
}

/// A key: inside the layout, or from the last few byte values, outside it.
pub(super) fn small_key(x: u8) -> Key {
    match x {
        0xfc => Key(KEYS),
        0xfd => Key(KEYS + 1),
        0xfe => Key(u64::MAX),
        0xff => Key(1 << 40),
        _ => Key(u64::from(x) % KEYS),
    }
}

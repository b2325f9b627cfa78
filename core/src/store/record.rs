//! The one interface over the two kinds of slot. Under its shard's latch, a key's record is
//! found once (a [`Spot`]: in the shard's table, or in an allocated page), read as a
//! [`Record`], and changed by the transitions below, whatever kind of slot keeps it. Every
//! operation of the store is written once over these; only this file knows how a table slot and
//! a page slot differ.
//!
//! A key's states at this node ([`Held`]) and the transitions between them:
//!
//! - untouched → owned: [`Store::touch`] (a worker's first access, or `take`);
//! - owned → away (on the home node) or absent: [`Store::hand_over`] (`take`);
//! - absent, away or replica → owned: [`Store::own`] (`install`);
//! - absent or away → replica: [`Store::add_replica`] (`install_replica`);
//! - replica → away (on the home node) or absent: [`Store::unreplicate`] (`drop_replica`);
//! - away or replica, on the home node → the same with a newer owner: [`Store::set_owner`]
//!   (`record_owner`).
//!
//! Every other (state, operation) pair changes nothing; `tests.rs` tries each one.
//!
//! Each transition asserts the state it starts from (`invariant!`): the callers check it first,
//! under the same latch, so a failed assertion is a bug in the store.

use super::page::{
    home_record, page_of, page_of_mut, set_version, state_of, version_of, HomeSlot, HomeState,
};
use super::table::{alloc_range, FreeLists, Shard};
use super::{fold_unsent, Place, Slot, State, Store};
use crate::ids::{mix, Epoch, Key, NodeId, Version};

/// Where a key's record is in its shard, as found under the shard's latch.
#[derive(Clone, Copy)]
pub(super) enum Spot {
    /// In the shard's table, which `mix` (the key's [`mix`]) finds it in. `page`: the key is
    /// homed here, at this page and position of a page that is not allocated yet (its first
    /// touch may allocate it).
    Table { mix: u64, page: Option<(u64, usize)> },
    /// At position `pos` of the shard's allocated page `page`.
    Page { page: u64, pos: usize },
}

/// A key's state at this node, whatever kind of slot keeps its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Held {
    /// Not here, and not homed here: nothing known.
    Absent,
    /// Homed here and never touched: held here, with its initial value.
    Untouched,
    /// The main copy is here.
    Owned,
    /// Homed here and held by another node; no replica here.
    Away,
    /// A replica is here (on the home node, with the key's ownership record).
    Replica,
}

/// What a key's record says.
#[derive(Clone, Copy, Debug)]
pub(super) struct Record {
    pub(super) held: Held,
    pub(super) epoch: Epoch,
    /// The owner recorded (this node for a main copy held here).
    pub(super) owner: NodeId,
}

/// Where an arriving main copy's value goes: a range of the shard's arena (for a table slot), or
/// the key's place in its page.
#[derive(Clone, Copy)]
pub(super) enum Room {
    Arena(u32),
    Page,
}

impl Store {
    /// Where the record of `key`, whose place is `place`, is in its shard `shard` (whose latch
    /// the caller holds).
    #[inline(always)]
    pub(super) fn spot(&self, shard: &Shard, place: Place, key: Key) -> Spot {
        match place {
            Place::Table { mix, .. } => Spot::Table { mix, page: None },
            Place::Page { page, pos, .. } if page_of(&shard.pages, page).is_some() => {
                Spot::Page { page, pos }
            }
            Place::Page { page, pos, .. } => Spot::Table { mix: mix(key), page: Some((page, pos)) },
        }
    }

    /// Whether the key whose record is at `spot` is homed here. A table key under the hashed
    /// placement costs a division: asked only where needed.
    #[inline]
    pub(super) fn is_home(&self, spot: Spot) -> bool {
        match spot {
            Spot::Table { mix, page: None } => self.table_home_mix(mix),
            Spot::Table { page: Some(_), .. } | Spot::Page { .. } => true,
        }
    }

    /// Whether this node keeps the ownership record of `key` in its shard's table (`shard`):
    /// the key is homed here, and under the dense placement its page is not allocated.
    pub(super) fn record_in_table(&self, shard: &Shard, key: Key) -> bool {
        let spot = self.spot(shard, self.place(key), key);
        matches!(spot, Spot::Table { .. }) && self.is_home(spot)
    }

    /// What the record of `key` at `spot` says.
    #[inline(always)]
    pub(super) fn record(&self, shard: &Shard, spot: Spot, key: Key) -> Record {
        match spot {
            Spot::Table { mix, .. } => match shard.map.get_mixed(mix, key) {
                Some(s) => {
                    let held = match s.state {
                        State::Owned => Held::Owned,
                        State::Away => Held::Away,
                        State::Replica => Held::Replica,
                    };
                    Record { held, epoch: s.epoch, owner: s.owner }
                }
                None if self.is_home(spot) => {
                    Record { held: Held::Untouched, epoch: Epoch(0), owner: self.me }
                }
                None => Record { held: Held::Absent, epoch: Epoch(0), owner: self.me },
            },
            Spot::Page { page, pos } => {
                let h = home_record(&shard.pages, page, pos).unwrap_or_default();
                let held = match h.state {
                    HomeState::Untouched => Held::Untouched,
                    HomeState::Owned => Held::Owned,
                    // A replica of a key whose record is in a page is in the table.
                    HomeState::Away => match shard.map.get(&key) {
                        Some(r) => {
                            invariant!(r.state == State::Replica, "a page key's table slot is a replica");
                            Held::Replica
                        }
                        None => Held::Away,
                    },
                };
                Record { held, epoch: h.epoch, owner: h.owner }
            }
        }
    }

    /// Runs `f` on the value of `key` at `spot` (with a replica's unsent delta) and its
    /// version: a main copy's, or a replica's if `REPLICA`. Gives `f` back for any other record;
    /// an untouched key needs [`Store::touch`] first. `f` is called in each arm, where the
    /// compiler knows whether there is a delta: the add kernels stay as tight as for one kind.
    #[inline(always)]
    pub(super) fn with_slot_value<const REPLICA: bool, R, F>(
        &self,
        shard: &mut Shard,
        spot: Spot,
        key: Key,
        f: F,
    ) -> Result<R, F>
    where
        F: FnOnce(&mut [f32], Option<&mut [f32]>, &mut Version) -> R,
    {
        match spot {
            Spot::Table { mix, .. } => match shard.map.get_mut_mixed(mix, key) {
                Some(slot) => with_table_value::<REPLICA, R, F>(&mut shard.arena, slot, f),
                None => Err(f),
            },
            Spot::Page { page, pos } => {
                let Shard { map, arena, pages, .. } = shard;
                let Some(p) = page_of_mut(pages, page) else {
                    return Err(f);
                };
                match p.state(pos) {
                    Some(HomeState::Owned) => {
                        match self.layout.len_of(key).and_then(|len| p.entry_mut(pos, len)) {
                            Some((record, value)) => {
                                let mut version = version_of(record);
                                let r = f(value, None, &mut version);
                                set_version(record, version);
                                Ok(r)
                            }
                            None => Err(f),
                        }
                    }
                    Some(HomeState::Away) if REPLICA => match map.get_mut(&key) {
                        Some(r) => with_table_value::<REPLICA, R, F>(arena, r, f),
                        None => Err(f),
                    },
                    _ => Err(f),
                }
            }
        }
    }

    /// Untouched → owned: writes the initial value of `key`, homed here, into its slot. In a
    /// page not allocated yet, the touch counts toward the page and may allocate it (then the
    /// key is in the page). Returns the key's spot after; `None` if the arena cannot grow.
    pub(super) fn touch(&self, shard: &mut Shard, i: usize, spot: Spot, key: Key) -> Option<Spot> {
        match spot {
            Spot::Table { mix, page } => {
                invariant!(shard.map.get_mixed(mix, key).is_none(), "touch of a key with a slot");
                if let Some((page, pos)) = page {
                    if self.first_touch(shard, i, page) {
                        return self.touch(shard, i, Spot::Page { page, pos }, key);
                    }
                }
                self.materialize(shard, key)?;
                Some(spot)
            }
            Spot::Page { page, pos } => {
                let len = self.layout.len_of(key)?;
                let p = page_of_mut(&mut shard.pages, page)?;
                let (record, value) = p.entry_mut(pos, len)?;
                invariant!(state_of(record) == HomeState::Untouched, "touch of a touched page key");
                self.initialize(key, value);
                p.update(pos, |h| h.state = HomeState::Owned);
                Some(spot)
            }
        }
    }

    /// Creates the table slot of `key`, homed here, with its initial value.
    fn materialize<'s>(&self, shard: &'s mut Shard, key: Key) -> Option<&'s mut Slot> {
        // A key homed here needs no room from `store_keys_max`: its slot is part of this node's
        // share of the layout, which bounds it.
        let len = self.layout.len_of(key)?;
        let off = alloc_range(shard, len)?;
        self.initialize(key, &mut shard.arena[off as usize..off as usize + len]);
        let slot = Slot {
            version: Version(0),
            off,
            len: len as u32,
            epoch: Epoch(0),
            owner: self.me,
            state: State::Owned,
        };
        Some(shard.map.insert(key, slot))
    }

    /// Owned → away at `to` as of `epoch` (on the home node, which keeps the record) or absent
    /// (elsewhere: the reservation the key took goes back). The value's arena range is freed.
    pub(super) fn hand_over(&self, shard: &mut Shard, spot: Spot, key: Key, to: NodeId, epoch: Epoch) {
        match spot {
            Spot::Table { mix, .. } => {
                let home = self.is_home(spot);
                let Shard { map, free, arena, .. } = shard;
                let Some(slot) = map.get_mut_mixed(mix, key) else {
                    invariant!(false, "hand-over of a key with no slot");
                    return;
                };
                invariant!(slot.state == State::Owned, "hand-over of a key not owned");
                let taken = *slot;
                if home {
                    // The home node's record of the key, in the same slot.
                    *slot = Slot { state: State::Away, owner: to, epoch, off: 0, len: 0, ..taken };
                } else {
                    map.remove(&key);
                    self.release();
                }
                free_range(free, arena.len(), &taken);
            }
            Spot::Page { page, pos } => {
                let Some(p) = page_of_mut(&mut shard.pages, page) else {
                    invariant!(false, "hand-over of a page key outside its page");
                    return;
                };
                invariant!(p.state(pos) == Some(HomeState::Owned), "hand-over of a page key not owned");
                p.update(pos, |h| *h = HomeSlot { state: HomeState::Away, owner: to, epoch, ..*h });
            }
        }
    }

    /// Room for the value of an arriving main copy of `len` floats at `spot`; `None` if the
    /// arena cannot grow.
    pub(super) fn room_for(&self, shard: &mut Shard, spot: Spot, len: usize) -> Option<Room> {
        match spot {
            Spot::Table { .. } => alloc_range(shard, len).map(Room::Arena),
            Spot::Page { .. } => Some(Room::Page),
        }
    }

    /// Absent, away or replica → owned: the main copy of `key` arrives with `values`, at
    /// `epoch` and `version`, into `room` ([`Store::room_for`]). A replica held here turns into
    /// it: its unsent delta is added (one more update) and its range freed. The caller has
    /// checked the record and counted the key.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn own(
        &self,
        shard: &mut Shard,
        spot: Spot,
        key: Key,
        room: Room,
        epoch: Epoch,
        version: Version,
        values: &[f32],
    ) {
        invariant!(
            matches!(self.record(shard, spot, key).held, Held::Absent | Held::Away | Held::Replica),
            "a second main copy"
        );
        let len = values.len();
        let Some(value) = self.room_mut(shard, spot, room, len) else {
            invariant!(false, "no room where room_for found it");
            return;
        };
        value.copy_from_slice(values);
        let mut version = version;
        let replica = match spot {
            Spot::Table { mix, .. } => shard.map.get_mixed(mix, key),
            Spot::Page { .. } => shard.map.get(&key),
        }
        .copied()
        .filter(|s| s.state == State::Replica);
        if let Some(r) = replica {
            let (roff, rlen) = (r.off as usize, r.len as usize);
            let unsent =
                shard.arena.get(roff + rlen..roff + 2 * rlen).filter(|u| u.iter().any(|x| *x != 0.0));
            if let Some(unsent) = unsent.map(<[f32]>::to_vec) {
                if let Some(value) = self.room_mut(shard, spot, room, len) {
                    version = fold_unsent(value, &unsent, version);
                }
            }
            self.retire_replica(&mut shard.free, &r);
        }
        match (room, spot) {
            (Room::Arena(off), _) => {
                let slot = Slot { version, off, len: len as u32, epoch, owner: self.me, state: State::Owned };
                shard.map.insert(key, slot);
            }
            (Room::Page, _) => {
                if replica.is_some() {
                    shard.map.remove(&key);
                }
                if let Spot::Page { page, pos } = spot {
                    if let Some(p) = page_of_mut(&mut shard.pages, page) {
                        p.set_record(
                            pos,
                            HomeSlot { version, epoch, owner: self.me, state: HomeState::Owned },
                        );
                    }
                }
            }
        }
    }

    /// The `len` floats of `room` for the value of the key at `spot`.
    fn room_mut<'s>(
        &self,
        shard: &'s mut Shard,
        spot: Spot,
        room: Room,
        len: usize,
    ) -> Option<&'s mut [f32]> {
        match (room, spot) {
            (Room::Arena(off), _) => shard.arena.get_mut(off as usize..off as usize + len),
            (Room::Page, Spot::Page { page, pos }) => {
                page_of_mut(&mut shard.pages, page)?.value_mut(pos, len)
            }
            (Room::Page, Spot::Table { .. }) => None,
        }
    }

    /// Absent or away → replica: a replica of `key` with `values` at the owner's `version`,
    /// which on the home node keeps the ownership record (`epoch`, `owner`). Its slot is always
    /// in the table. The caller has checked the record and counted the replica.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn add_replica(
        &self,
        shard: &mut Shard,
        spot: Spot,
        key: Key,
        epoch: Epoch,
        owner: NodeId,
        version: Version,
        values: &[f32],
    ) -> Option<()> {
        invariant!(
            matches!(self.record(shard, spot, key).held, Held::Absent | Held::Away),
            "a replica beside the main copy"
        );
        let len = values.len();
        let off = alloc_range(shard, 2 * len)?;
        let region = &mut shard.arena[off as usize..off as usize + 2 * len];
        region[..len].copy_from_slice(values);
        region[len..].fill(0.0);
        let slot = Slot { version, off, len: len as u32, epoch, owner, state: State::Replica };
        shard.map.insert(key, slot);
        Some(())
    }

    /// Replica → away (on the home node, whose record stays in the table or in the page) or
    /// absent. `slot` is the replica's, whose delta the caller took.
    pub(super) fn unreplicate(&self, shard: &mut Shard, place: Place, key: Key, slot: Slot) {
        invariant!(slot.state == State::Replica, "unreplicate of a slot that is no replica");
        self.retire_replica(&mut shard.free, &slot);
        let spot = self.spot(shard, place, key);
        if matches!(spot, Spot::Table { .. }) && self.is_home(spot) {
            shard.map.insert(key, Slot { state: State::Away, off: 0, len: 0, ..slot });
        } else {
            shard.map.remove(&key);
        }
    }

    /// Away or replica, on the home node: the record names `owner` as of `epoch`.
    pub(super) fn set_owner(&self, shard: &mut Shard, spot: Spot, key: Key, owner: NodeId, epoch: Epoch) {
        invariant!(
            {
                let was = self.record(shard, spot, key);
                matches!(was.held, Held::Away | Held::Replica) && was.epoch < epoch
            },
            "owner of an owned key"
        );
        match spot {
            Spot::Table { mix, .. } => {
                if let Some(s) = shard.map.get_mut_mixed(mix, key) {
                    s.owner = owner;
                    s.epoch = epoch;
                }
            }
            Spot::Page { page, pos } => {
                if let Some(p) = page_of_mut(&mut shard.pages, page) {
                    p.update(pos, |s| {
                        s.owner = owner;
                        s.epoch = epoch;
                    });
                }
            }
        }
    }

    /// A replica's slot is gone (dropped, or turned into the main copy): its arena range goes
    /// to the free lists and it no longer counts against `replicas_max`.
    fn retire_replica(&self, free: &mut FreeLists, r: &Slot) {
        invariant!(r.state == State::Replica, "retiring a slot that is no replica");
        free.entry(r.alloc_len()).or_default().push(r.off);
        let before = self.replicas.fetch_sub(1, core::sync::atomic::Ordering::Relaxed);
        invariant!(before > 0, "more replicas retired than installed");
    }
}

/// [`Store::with_slot_value`] of a table slot: a main copy's value, or a replica's (with its
/// unsent delta) if `REPLICA`.
#[inline(always)]
fn with_table_value<const REPLICA: bool, R, F>(arena: &mut [f32], slot: &mut Slot, f: F) -> Result<R, F>
where
    F: FnOnce(&mut [f32], Option<&mut [f32]>, &mut Version) -> R,
{
    let (off, len) = (slot.off as usize, slot.len as usize);
    match slot.state {
        State::Owned => match arena.get_mut(off..off + len) {
            Some(value) => Ok(f(value, None, &mut slot.version)),
            None => Err(f),
        },
        State::Replica if REPLICA => match arena.get_mut(off..off + 2 * len) {
            Some(both) => {
                let (value, delta) = both.split_at_mut(len);
                Ok(f(value, Some(delta), &mut slot.version))
            }
            None => Err(f),
        },
        _ => Err(f),
    }
}

/// Gives the arena range of `slot` (in an arena of `arena_len` floats) to the free lists.
fn free_range(free: &mut FreeLists, arena_len: usize, slot: &Slot) {
    invariant!(slot.off as usize + slot.alloc_len() as usize <= arena_len, "a range outside the arena");
    free.entry(slot.alloc_len()).or_default().push(slot.off);
}

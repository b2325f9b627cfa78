//! A key's lifecycle at one node, and the owner's decision, as pure functions.
//!
//! [`step`] is the lifecycle: from the tag of a key's record (`super::record`: which of the
//! rare parts it has, a forwarding pointer, a replica, operations waiting for it to arrive,
//! replica holders as its owner) and an [`Event`] to the next tag and the [`Actions`] the node
//! carries out. `None` is a pair that cannot happen; the node asserts it never meets one
//! (`invariant!` in `Keys::transition`). The intent count and the round's flags are not part
//! of the tag: they change on every key-intent, independently of it, and live in the record's
//! hot part.
//!
//! [`decide`] is the owner's decision on one entry of a sync request for a key it holds
//! (adapm-cikm23.txt §4.1 and Appendix B.2.4): move the key, give a replica, keep it and let
//! the requester ask again, or refuse. It reads only the entry and what it asks of its
//! [`Looks`].
//!
//! Both are tested below over every input.

use super::owner::Policy;

/// What a key's record holds besides its intent count and round flags. The discriminant is
/// a set of bits, one per part (`POINTER`, `OWNED`, `REPLICA`, `INCOMING`), so that the hot
/// path asks about a part with one test.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub(super) enum Life {
    /// Nothing (a record in this state has only a hot part, or no record exists).
    #[default]
    Idle = 0,
    /// The key was given away; a forwarding pointer stays until the home confirms the move.
    Away = POINTER,
    /// Owned here, with replicas at other nodes (the owner's list of holders).
    Owned = OWNED,
    /// Data that no state describes (owned here and pointed away): a bug.
    Invalid = OWNED | POINTER,
    /// A replica is held here.
    Replica = REPLICA,
    /// `Away`, and a replica from the new owner is held already.
    AwayReplica = REPLICA | POINTER,
    /// This node asked for the key (a localize) and operations may wait for it.
    Incoming = INCOMING,
    /// `Away`, and the key was asked for again.
    AwayIncoming = INCOMING | POINTER,
}

const POINTER: u8 = 1;
const OWNED: u8 = 2;
const REPLICA: u8 = 4;
const INCOMING: u8 = 8;

impl Life {
    /// Every tag (for the tests over every pair, and the checks' counts).
    pub(super) const ALL: [Life; 8] = [
        Life::Idle,
        Life::Owned,
        Life::Replica,
        Life::Incoming,
        Life::Away,
        Life::AwayReplica,
        Life::AwayIncoming,
        Life::Invalid,
    ];

    /// The tag of the parts `bits` names (`Invalid` for a set no state has).
    #[inline]
    pub(super) fn from_parts(pointer: bool, place: u8) -> Life {
        match place | u8::from(pointer) {
            0 => Life::Idle,
            POINTER => Life::Away,
            OWNED => Life::Owned,
            REPLICA => Life::Replica,
            b if b == REPLICA | POINTER => Life::AwayReplica,
            INCOMING => Life::Incoming,
            b if b == INCOMING | POINTER => Life::AwayIncoming,
            _ => Life::Invalid,
        }
    }
    #[inline]
    pub(super) fn has_pointer(self) -> bool {
        self as u8 & POINTER != 0
    }
    #[inline]
    pub(super) fn has_replica(self) -> bool {
        self as u8 & REPLICA != 0
    }
    #[inline]
    pub(super) fn is_incoming(self) -> bool {
        self as u8 & INCOMING != 0
    }
    /// The bit of a place (no pointer).
    pub(super) const OWNED: u8 = OWNED;
    pub(super) const REPLICA: u8 = REPLICA;
    pub(super) const INCOMING: u8 = INCOMING;
    /// The tag with the pointer part taken away.
    fn without_pointer(self) -> Life {
        match self {
            Life::Away => Life::Idle,
            Life::AwayReplica => Life::Replica,
            Life::AwayIncoming => Life::Incoming,
            other => other,
        }
    }
}

/// What happens to a key at this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Event {
    /// Its main copy was installed here (handed over, or a replica upgraded).
    Installed,
    /// Its main copy was taken from here and sent on.
    Departed,
    /// The home confirmed the move the forwarding pointer is for.
    Released,
    /// A local localize asked for it.
    Asked,
    /// It is here: what waited for it runs.
    Arrived,
    /// What waited for it will not be served here (the request could not be sent, a peer
    /// failed).
    WaitEnded,
    /// A replica was installed here.
    ReplicaMade,
    /// The replica left the store.
    ReplicaGone,
    /// As owner: a node holds a replica.
    HolderAdded,
    /// As owner: one of several holders dropped its replica.
    HolderGone,
    /// As owner: the last holder dropped its replica.
    HoldersGone,
}

impl Event {
    #[cfg(test)]
    pub(super) const ALL: [Event; 11] = [
        Event::Installed,
        Event::Departed,
        Event::Released,
        Event::Asked,
        Event::Arrived,
        Event::WaitEnded,
        Event::ReplicaMade,
        Event::ReplicaGone,
        Event::HolderAdded,
        Event::HolderGone,
        Event::HoldersGone,
    ];
}

/// What the node does after a step, as bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Actions(u8);

impl Actions {
    pub(super) const NONE: Actions = Actions(0);
    /// The forwarding pointer is dropped.
    pub(super) const POINTER_DROPPED: Actions = Actions(1);
    /// The replica held here became the main copy (counted).
    pub(super) const REPLICA_UPGRADED: Actions = Actions(2);
    /// The owner's list of replica holders is dropped with the key.
    pub(super) const HOLDERS_DROPPED: Actions = Actions(4);
    /// What waited for the key runs now, in order.
    pub(super) const RUN_WAITING: Actions = Actions(8);
    /// The store slot reserved for the key goes back.
    pub(super) const UNRESERVE: Actions = Actions(16);

    pub(super) const fn or(self, o: Actions) -> Actions {
        Actions(self.0 | o.0)
    }
    pub(super) fn contains(self, o: Actions) -> bool {
        self.0 & o.0 == o.0
    }
}

/// One step of a key's lifecycle at this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Step {
    pub(super) next: Life,
    pub(super) actions: Actions,
}

/// The lifecycle: the next tag after `event` in state `life`, and what the node does, or
/// `None` if the event cannot happen in that state. Inlined always: the event is a constant
/// where the node applies a step, and the match folds to a few tests of the tag.
#[inline(always)]
pub(super) fn step(life: Life, event: Event) -> Option<Step> {
    use Life::*;
    let to = |next: Life, actions: Actions| Some(Step { next, actions });
    let none = Actions::NONE;
    match (event, life) {
        (_, Invalid) => None,
        // A second main copy is refused before it reaches the records.
        (Event::Installed, Owned) => None,
        (Event::Installed, _) => {
            let mut actions = none;
            if life.has_pointer() {
                actions = actions.or(Actions::POINTER_DROPPED);
            }
            if life.has_replica() {
                actions = actions.or(Actions::REPLICA_UPGRADED);
            }
            // What waits for the key stays until `Arrived` runs it.
            let next = if life.is_incoming() { Incoming } else { Idle };
            to(next, actions)
        }
        (Event::Departed, Idle) => to(Away, none),
        (Event::Departed, Owned) => to(Away, Actions::HOLDERS_DROPPED),
        // Only a key held here departs: no replica, pointer or wait for it.
        (Event::Departed, _) => None,
        (Event::Released, l) if l.has_pointer() => to(l.without_pointer(), Actions::POINTER_DROPPED),
        (Event::Released, _) => None,
        (Event::Asked, Idle | Incoming) => to(Incoming, none),
        (Event::Asked, Away | AwayIncoming) => to(AwayIncoming, none),
        // A key held or replicated here is not asked for.
        (Event::Asked, _) => None,
        (Event::Arrived, Incoming) => to(Idle, Actions::RUN_WAITING),
        (Event::Arrived, _) => None,
        (Event::WaitEnded, Incoming) => to(Idle, Actions::UNRESERVE),
        (Event::WaitEnded, AwayIncoming) => to(Away, Actions::UNRESERVE),
        (Event::WaitEnded, _) => None,
        (Event::ReplicaMade, Idle) => to(Replica, none),
        (Event::ReplicaMade, Away) => to(AwayReplica, none),
        (Event::ReplicaMade, _) => None,
        (Event::ReplicaGone, Replica) => to(Idle, none),
        (Event::ReplicaGone, AwayReplica) => to(Away, none),
        (Event::ReplicaGone, _) => None,
        (Event::HolderAdded, Idle | Owned) => to(Owned, none),
        (Event::HolderAdded, _) => None,
        (Event::HolderGone, Owned) => to(Owned, none),
        (Event::HoldersGone, Owned) => to(Idle, none),
        (Event::HolderGone | Event::HoldersGone, _) => None,
    }
}

/// Which entry of a sync request the owner decides on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Entry {
    /// The requester's intent started.
    Start,
    /// A replica's sync; `room`: the holder reserved a slot for the main copy.
    Sync { room: bool },
    /// A replica's last sync: its holder's intent ended.
    Final,
}

/// What the owner's decision may read besides the entry, each part only if the decision
/// depends on it (each costs a look at a table).
pub(super) trait Looks {
    /// Whether this node has intent for the key.
    fn intent_here(&self) -> bool;
    /// Whether a node other than the requester holds a replica of the key.
    fn other_holders(&self) -> bool;
    /// Whether the key arrived here less than a round and `relocation_hold` ago, and whether
    /// the table of forwarding pointers is full.
    fn moving(&self) -> (bool, bool);
}

/// The owner's answer to one entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Decision {
    /// Keep the key; acknowledge (the requester asks again next round if it still wants it).
    Ack,
    /// The requester holds no replica any more: drop it from the holders, acknowledge.
    DropHolder,
    /// Move the key to the requester (its replica, if any, becomes the main copy).
    Relocate,
    /// The key would move, but there is no room for its forwarding pointer: fail the entry.
    RefuseMove,
    /// Give the requester a replica (the key's current value).
    GiveReplica,
    /// Keep the requester's replica in sync: acknowledge its version or refresh it.
    Sync,
}

/// The owner's decision (adapm-cikm23.txt §4.1) on `entry` from a requester (this node
/// itself if `from_me`): under the adaptive technique, a key moves to the only node with
/// intent (the owner has none, and no other node holds a replica), and every other node with
/// intent gets a replica; without replication every start moves it; under the replicating
/// techniques every start gets a replica. A key that arrived lately stays; a move without room
/// for its pointer is refused. Pure, given `looks` (which it asks only what it needs).
#[inline(always)]
pub(super) fn decide(policy: Policy, entry: Entry, from_me: bool, looks: &impl Looks) -> Decision {
    let alone = || !looks.intent_here() && !looks.other_holders();
    let wants_move = match entry {
        Entry::Start if from_me => return Decision::Ack,
        Entry::Final => return Decision::DropHolder,
        Entry::Sync { .. } if from_me => return Decision::DropHolder,
        Entry::Start => match policy {
            Policy::Relocate => true,
            Policy::Replicate => false,
            Policy::Adaptive => alone(),
        },
        Entry::Sync { room } => policy == Policy::Adaptive && room && alone(),
    };
    if !wants_move {
        return if entry == Entry::Start { Decision::GiveReplica } else { Decision::Sync };
    }
    match looks.moving() {
        (true, _) => Decision::Ack,
        (false, true) => Decision::RefuseMove,
        (false, false) => Decision::Relocate,
    }
}

#[cfg(test)]
mod tests {
    use core::cell::Cell;

    use super::*;

    /// Every (state, event) pair: the allowed ones lead to a valid state whose parts follow
    /// from the event, the actions say what changed, and the impossible ones are exactly the
    /// pairs listed.
    #[test]
    fn every_state_event_pair() {
        let mut allowed = 0;
        for life in Life::ALL {
            for event in Event::ALL {
                let Some(s) = step(life, event) else {
                    let impossible = life == Life::Invalid
                        || match event {
                            Event::Installed => life == Life::Owned,
                            Event::Departed => !matches!(life, Life::Idle | Life::Owned),
                            Event::Released => !life.has_pointer(),
                            Event::Asked => {
                                !matches!(life, Life::Idle | Life::Incoming | Life::Away | Life::AwayIncoming)
                            }
                            Event::Arrived => life != Life::Incoming,
                            Event::WaitEnded => !life.is_incoming(),
                            Event::ReplicaMade => !matches!(life, Life::Idle | Life::Away),
                            Event::ReplicaGone => !life.has_replica(),
                            Event::HolderAdded => !matches!(life, Life::Idle | Life::Owned),
                            Event::HolderGone | Event::HoldersGone => life != Life::Owned,
                        };
                    assert!(impossible, "{event:?} in {life:?} should be allowed");
                    continue;
                };
                allowed += 1;
                let (next, a) = (s.next, s.actions);
                assert_ne!(next, Life::Invalid, "{event:?} in {life:?}");
                // A pointer exists only for a key not held here, and only `Departed` makes one.
                if next.has_pointer() && !life.has_pointer() {
                    assert_eq!(event, Event::Departed, "{life:?}");
                }
                assert_eq!(
                    a.contains(Actions::POINTER_DROPPED),
                    life.has_pointer() && !next.has_pointer(),
                    "{event:?} in {life:?}: the action says whether the pointer went"
                );
                assert_eq!(
                    a.contains(Actions::REPLICA_UPGRADED),
                    event == Event::Installed && life.has_replica(),
                    "{event:?} in {life:?}"
                );
                assert_eq!(
                    a.contains(Actions::HOLDERS_DROPPED),
                    life == Life::Owned && next != Life::Owned && event == Event::Departed
                );
                assert_eq!(a.contains(Actions::RUN_WAITING), event == Event::Arrived);
                assert_eq!(a.contains(Actions::UNRESERVE), event == Event::WaitEnded);
                match event {
                    Event::Installed => {
                        assert!(!next.has_pointer() && !next.has_replica() && next != Life::Owned);
                        assert_eq!(next.is_incoming(), life.is_incoming(), "the wait runs at `Arrived`");
                    }
                    Event::Departed => assert_eq!(next, Life::Away),
                    Event::Released => assert_eq!(next, life.without_pointer()),
                    Event::Asked => {
                        assert!(next.is_incoming());
                        assert_eq!(next.has_pointer(), life.has_pointer());
                    }
                    Event::Arrived | Event::WaitEnded => {
                        assert!(!next.is_incoming());
                        assert_eq!(next.has_pointer(), life.has_pointer());
                    }
                    Event::ReplicaMade => {
                        assert!(next.has_replica());
                        assert_eq!(next.has_pointer(), life.has_pointer());
                    }
                    Event::ReplicaGone => {
                        assert!(!next.has_replica());
                        assert_eq!(next.has_pointer(), life.has_pointer());
                    }
                    Event::HolderAdded | Event::HolderGone => assert_eq!(next, Life::Owned),
                    Event::HoldersGone => assert_eq!(next, Life::Idle),
                }
            }
        }
        assert_eq!(allowed, 26, "the number of allowed pairs changed: review the table");
    }

    /// Fixed answers to the decision's looks, counting the looks taken.
    struct Fixed {
        intent_here: bool,
        other_holders: bool,
        on_hold: bool,
        pointers_full: bool,
        intent_looks: Cell<u32>,
        holder_looks: Cell<u32>,
        moving: Cell<u32>,
    }

    impl Looks for Fixed {
        fn intent_here(&self) -> bool {
            self.intent_looks.set(self.intent_looks.get() + 1);
            self.intent_here
        }
        fn other_holders(&self) -> bool {
            self.holder_looks.set(self.holder_looks.get() + 1);
            self.other_holders
        }
        fn moving(&self) -> (bool, bool) {
            self.moving.set(self.moving.get() + 1);
            (self.on_hold, self.pointers_full)
        }
    }

    /// Every decision input (policies, entries, and each look's answers) against the rules
    /// of DESIGN.md, stated independently of `decide`'s code; and no look is taken that the
    /// answer does not depend on.
    #[test]
    fn every_decision_input() {
        let entries = [Entry::Start, Entry::Sync { room: false }, Entry::Sync { room: true }, Entry::Final];
        let mut n = 0;
        for policy in [Policy::Adaptive, Policy::Relocate, Policy::Replicate] {
            for entry in entries {
                for bits in 0..32u8 {
                    let bit = |i: u8| bits & (1 << i) != 0;
                    let from_me = bit(0);
                    let a = Fixed {
                        intent_here: bit(1),
                        other_holders: bit(2),
                        on_hold: bit(3),
                        pointers_full: bit(4),
                        intent_looks: Cell::new(0),
                        holder_looks: Cell::new(0),
                        moving: Cell::new(0),
                    };
                    let d = decide(policy, entry, from_me, &a);
                    let what = (policy, entry, bits);
                    n += 1;
                    let looks = |a: &Fixed| a.intent_looks.get() + a.holder_looks.get() + a.moving.get();
                    assert!(
                        a.intent_looks.get() <= 1 && a.holder_looks.get() <= 1 && a.moving.get() <= 1,
                        "{what:?}: a look taken twice"
                    );
                    // A holder's last sync, or the owner's own replica entry, only drops it.
                    if entry == Entry::Final || (matches!(entry, Entry::Sync { .. }) && from_me) {
                        assert_eq!(d, Decision::DropHolder, "{what:?}");
                        assert_eq!(looks(&a), 0, "{what:?}");
                        continue;
                    }
                    // The owner's own start: the key is here already.
                    if entry == Entry::Start && from_me {
                        assert_eq!(d, Decision::Ack, "{what:?}");
                        assert_eq!(looks(&a), 0, "{what:?}");
                        continue;
                    }
                    let alone = !a.intent_here && !a.other_holders;
                    // Whether the rules move the key, if it may move at all.
                    let moves = match (policy, entry) {
                        (Policy::Relocate, Entry::Start) => true,
                        (Policy::Replicate, _) => false,
                        (Policy::Adaptive, Entry::Start) => alone,
                        (Policy::Adaptive, Entry::Sync { room }) => room && alone,
                        (Policy::Relocate, _) => false,
                        (_, Entry::Final) => unreachable!(),
                    };
                    let expected = match (moves, entry) {
                        (true, _) if a.on_hold => Decision::Ack,
                        (true, _) if a.pointers_full => Decision::RefuseMove,
                        (true, _) => Decision::Relocate,
                        (false, Entry::Start) => Decision::GiveReplica,
                        (false, _) => Decision::Sync,
                    };
                    assert_eq!(d, expected, "{what:?}");
                    // The looks: who shares the key only under the adaptive technique (and for
                    // a sync only with room; the holders only if the owner has no intent),
                    // whether it may move only if it would.
                    let needs_sharing = policy == Policy::Adaptive
                        && (entry == Entry::Start || entry == Entry::Sync { room: true });
                    assert_eq!(a.intent_looks.get() == 1, needs_sharing, "{what:?}");
                    assert_eq!(a.holder_looks.get() == 1, needs_sharing && !a.intent_here, "{what:?}");
                    assert_eq!(a.moving.get() == 1, moves, "{what:?}");
                    // Relocate only while no other replica exists and the owner has no intent.
                    if d == Decision::Relocate && policy == Policy::Adaptive {
                        assert!(alone, "{what:?}");
                    }
                    // A replica holder's entry never gets a fresh replica.
                    assert!(!(matches!(entry, Entry::Sync { .. }) && d == Decision::GiveReplica));
                }
            }
        }
        assert_eq!(n, 3 * 4 * 32);
    }
}

//! The heal of the `cluster_schedule` target (see the parent module's docs): every worker
//! finalizes once it does not wait at its gate, every frame is delivered and the timers run
//! until the cluster has settled, then the end state is checked.

use alloc::vec::Vec;

use hashbrown::HashMap;

use super::{Cluster, HEAL_DELIVERIES_MAX, HEAL_TIMER_STEPS_MAX, KEYS, LEN};
use crate::ids::Key;
use crate::store::Whereabouts;
use crate::time::Duration;

/// Where the heal's settling stands under techniques that keep replicas: `stage` 0 before the
/// first check, 1 while every node runs its first two rounds, 2 while it runs two more.
struct Settle {
    stage: u8,
    target: Vec<u64>,
}

impl Cluster {
    /// Ends every intent, delivers everything and runs the timers until the cluster has
    /// settled, then checks that every operation is done, every replica agrees and every sum
    /// is exact.
    pub(super) fn heal(&mut self) {
        self.healing = true;
        let permanent = self.cfg.technique.keeps_replicas();
        let mut deliveries = 0;
        let mut settle = Settle { stage: 0, target: Vec::new() };
        let mut quiet = None;
        let mut steps = 0;
        loop {
            // Workers whose gates let them pass finalize; their retires may send more.
            while self.finalize_ready() || self.frames > 0 {
                self.deliver_all(&mut deliveries);
            }
            if !self.all_finalized() {
                self.check_stuck_gates(&mut quiet);
            } else if self.settled(permanent, &mut settle) {
                break;
            }
            steps += 1;
            assert!(
                steps <= HEAL_TIMER_STEPS_MAX,
                "the cluster did not settle within {HEAL_TIMER_STEPS_MAX} timer steps; waiting at gates: {}{}",
                self.waiters(),
                self.summary()
            );
            for i in 0..self.n {
                if let Some(t) = self.nodes[i].poll_timeout() {
                    let d = Duration(t.0.saturating_sub(self.now[i].0));
                    self.advance(i, d);
                }
            }
        }
        for (i, node) in self.nodes.iter().enumerate() {
            let idle = if permanent {
                node.pending_requests() == 0 && node.keys_incoming() == 0 && node.waiting_ops() == 0
            } else {
                node.is_idle()
            };
            assert!(
                idle,
                "node {i} is not idle after the heal: {} pending, {} incoming, {} waiting",
                node.pending_requests(),
                node.keys_incoming(),
                node.waiting_ops()
            );
        }
        if let Some(op) = self.ops.values().next() {
            panic!("{op:?} never completed ({} operations in all)", self.ops.len());
        }
        for (i, node) in self.nodes.iter().enumerate() {
            // Every move was confirmed by the key's home, so every pointer was released.
            assert_eq!(node.forwarding_pointers(), 0, "node {i} keeps forwarding pointers after the heal");
            assert_eq!(node.waiting_ops(), 0, "node {i} has operations waiting after the heal");
        }
        for k in (0..KEYS).map(Key) {
            // The home knows the owner, with the epoch of the move that put the key there.
            let holder = (0..self.n).find(|i| self.nodes[*i].store().holds(k));
            let Some(holder) = holder else { panic!("key {k} is held by no node after the heal") };
            let home = self.nodes[0].store().homes().home(k).index();
            let at_holder = self.nodes[holder].store().whereabouts(k);
            let at_home = self.nodes[home].store().whereabouts(k);
            let agree = match (at_holder, at_home) {
                (Whereabouts::Here(e), Whereabouts::Here(f)) => holder == home && e == f,
                (Whereabouts::Here(e), Whereabouts::Away(owner, f)) => owner.index() == holder && e == f,
                _ => false,
            };
            assert!(agree, "key {k} is at node {holder} ({at_holder:?}); its home {home} says {at_home:?}");
        }
        let mut values: HashMap<Key, Vec<f32>> = HashMap::new();
        for node in &self.nodes {
            node.store().for_each_owned(|k, _, _, v| {
                values.insert(k, v.to_vec());
            });
        }
        self.check_replicas(&values, permanent);
        for k in 0..KEYS {
            let m = &self.keys[k as usize];
            if m.sets > 0 || m.uncertain {
                continue;
            }
            // A key never touched is held by its home with the initial value (zero).
            let v = values.get(&Key(k)).cloned().unwrap_or(alloc::vec![0.0; LEN]);
            assert!(
                v[..] == m.done[..] && m.done == m.issued,
                "key {k} ends as {v:?}; its adds sum to {:?} ({:?} issued)",
                m.done,
                m.issued
            );
        }
    }

    /// Delivers every queue until all are empty, checking after each delivery.
    fn deliver_all(&mut self, deliveries: &mut usize) {
        while self.frames > 0 {
            for q in 0..self.queues.len() {
                if self.deliver(q) {
                    *deliveries += 1;
                    self.check();
                }
            }
            assert!(
                *deliveries <= HEAL_DELIVERIES_MAX,
                "the cluster did not settle within {HEAL_DELIVERIES_MAX} deliveries"
            );
        }
    }

    /// Whether the heal may stop (see the module docs); nothing is in flight when it is asked.
    fn settled(&self, permanent: bool, s: &mut Settle) -> bool {
        if !permanent {
            // A `wait_sync` waits for rounds, which idle nodes still run on their timers.
            return self.ops.is_empty() && self.nodes.iter().all(|n| n.is_idle());
        }
        let rounds = || self.nodes.iter().map(|n| n.sync_rounds_done() + 2).collect::<Vec<_>>();
        if s.stage == 0 {
            s.stage = 1;
            s.target = rounds();
            return false;
        }
        let reached = self.nodes.iter().zip(&s.target).all(|(n, t)| {
            n.sync_rounds_done() >= *t
                && n.pending_requests() == 0
                && n.keys_incoming() == 0
                && n.forwarding_pointers() == 0
                && n.waiting_ops() == 0
        }) && self.ops.is_empty();
        if reached && s.stage == 1 {
            s.stage = 2;
            s.target = rounds();
            return false;
        }
        reached
    }

    /// Every replica equals its main copy in `values` and has no unsent delta; none is left
    /// unless the technique keeps replicas for the whole run.
    fn check_replicas(&self, values: &HashMap<Key, Vec<f32>>, permanent: bool) {
        for (i, node) in self.nodes.iter().enumerate() {
            let mut replicas = Vec::new();
            node.store().for_each_replica(|k, _, v, d| replicas.push((k, v.to_vec(), d.to_vec())));
            assert!(
                permanent || replicas.is_empty(),
                "node {i} keeps replicas of {:?} after every intent ended",
                replicas.iter().map(|r| r.0).collect::<Vec<_>>()
            );
            for (k, v, d) in replicas {
                assert!(
                    d.iter().all(|x| *x == 0.0),
                    "node {i}: replica of key {k} keeps an unsent delta {d:?}"
                );
                let main = values.get(&k).cloned().unwrap_or(alloc::vec![0.0; LEN]);
                assert_eq!(v, main, "node {i}: replica of key {k} differs from its main copy");
            }
        }
    }

    /// A line per node, for failure messages.
    pub(super) fn summary(&self) -> alloc::string::String {
        use core::fmt::Write as _;
        let mut out = alloc::string::String::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let _ = write!(
                out,
                "\n node {i}: idle {}, {} pending, {} incoming, {} waiting, {} pointers, {} rounds, \
                 sync outstanding {:?}, replicas {:?}",
                n.is_idle(),
                n.pending_requests(),
                n.keys_incoming(),
                n.waiting_ops(),
                n.forwarding_pointers(),
                n.sync_rounds_done(),
                n.sync_outstanding(),
                n.replica_keys()
            );
        }
        out
    }
}

//! The harness's worker commands: pulls, pushes, localizes, clock and sampling commands, each
//! checked against what its arguments and the node's state allow.

use super::*;

impl Harness {
    pub(super) fn command(&mut self, op: u8, b: &mut Bytes<'_>) {
        let worker = if op >= 0xe0 { WorkerId(WORKERS) } else { WorkerId(u16::from(op >> 4) & 1) };
        self.next_ticket += 1;
        let ticket = Ticket(self.next_ticket);
        let pending = self.node.pending_requests();
        let wanted_input = self.node.wants_input();
        let now = self.now;
        let (kind, keys, result) = match op % 16 {
            10 => {
                let r = self.node.barrier(now, worker, ticket);
                ("barrier", Vec::new(), r)
            }
            11 => {
                let r = self.node.wait_sync(now, worker, ticket);
                ("wait_sync", Vec::new(), r)
            }
            12 => {
                let r = self.node.gate(now, worker, ticket);
                ("gate", Vec::new(), r)
            }
            k => {
                let keys = self.command_keys(b);
                let r = match k {
                    6 => self.node.pull(now, worker, ticket, &keys),
                    7 | 8 => {
                        let write = if k == 7 { WriteKind::Add } else { WriteKind::Set };
                        let values = self.command_values(&keys, b);
                        self.node.push(now, worker, ticket, write, &keys, &values)
                    }
                    _ => self.node.localize(now, worker, ticket, &keys),
                };
                (["pull", "push", "set", "localize"][usize::from(k - 6)], keys, r)
            }
        };
        let expected_len = self.cfg.layout.total_len(&keys);
        match result {
            Ok(()) => {
                assert!(worker.0 < WORKERS, "{kind} of worker {worker}, which does not exist, was accepted");
                // `wait_sync` sends nothing and `gate` nothing while the outbox is full (a
                // speculation waits), so a full outbox does not hold them back.
                let sends = kind != "wait_sync" && kind != "gate";
                assert!(wanted_input || !sends, "{kind} was accepted while the outbox was full");
                let cmd = match kind {
                    "barrier" => {
                        assert!(!self.any_peer_failed, "a barrier was entered after a peer failed");
                        *self.in_barrier.entry(worker).or_default() += 1;
                        Cmd::Barrier { worker }
                    }
                    "wait_sync" => Cmd::Sync,
                    "gate" => Cmd::Gate,
                    _ => {
                        let Ok(values_len) = expected_len else {
                            panic!("{kind} of keys outside the layout was accepted: {keys:?}")
                        };
                        assert!(!has_duplicate(&keys), "{kind} with a key twice was accepted: {keys:?}");
                        assert!(
                            pending < self.cfg.requests_pending_max,
                            "{kind} accepted at the request bound"
                        );
                        let creates_request =
                            kind != "localize" || self.cfg.technique != Technique::StaticPartitioning;
                        if creates_request {
                            self.reqs += 1;
                        }
                        match kind {
                            "pull" => Cmd::Pull { values_len },
                            "localize" => Cmd::Localize,
                            _ => Cmd::Write,
                        }
                    }
                };
                self.open.insert(ticket, cmd);
                if sends {
                    // The outbox held fewer than its bound frames when the command was accepted.
                    self.outbox_max = self.outbox_max.min(self.cfg.outbox_frames_max - 1);
                }
                // Under SparseSSP a gate may ask every peer about this clock and the next.
                let asks = if kind == "gate" { self.flush_growth() } else { 0 };
                self.after_input(growth(keys.len()) + asks);
            }
            Err(e) => {
                let ok = match e {
                    OpError::InvalidArgument => {
                        worker.0 >= WORKERS
                            || (kind == "barrier" && self.in_barrier.get(&worker).is_some_and(|n| *n > 0))
                    }
                    OpError::KeyOutsideLayout { key } => {
                        keys.contains(&key) && !self.cfg.layout.contains(key) && expected_len == Err(key)
                    }
                    OpError::ValueLength { expected, .. } => {
                        matches!(kind, "push" | "set") && expected_len == Ok(expected)
                    }
                    OpError::DuplicateKey { key } => keys.iter().filter(|k| **k == key).count() > 1,
                    OpError::Busy if kind == "wait_sync" => {
                        self.open.values().filter(|c| matches!(c, Cmd::Sync)).count()
                            >= 4 * usize::from(WORKERS)
                    }
                    OpError::Busy => !wanted_input || pending >= self.cfg.requests_pending_max,
                    OpError::StoreFull => kind == "localize",
                    OpError::PeerFailed { node } => {
                        let waits =
                            kind == "barrier" || (kind == "gate" && self.cfg.gate.staleness().is_some());
                        waits && node != ME && node.0 < NODES
                    }
                    _ => false,
                };
                assert!(ok, "{kind} {keys:?} of worker {worker} refused with {e:?}");
                // A refused command changes nothing, so it adds nothing to the outbox.
                self.after_input(0);
            }
        }
    }

    /// A worker's barrier, intent, clock advance, `wait_sync` or `end_intents` (see the module
    /// docs).
    pub(super) fn clock_command(&mut self, op: u8, b: &mut Bytes<'_>) {
        let worker = if op >= 0xe0 { WorkerId(WORKERS) } else { WorkerId(u16::from(op >> 4) & 1) };
        let exists = worker.0 < WORKERS;
        let now = self.now;
        let which = if op >= 0xe0 { b.u8() } else { op >> 5 };
        match which % 8 {
            5 => self.register_distribution(b),
            6 => self.prepare_sample(worker, b),
            7 => self.pull_sample(b),
            0 => self.command(10 | (op & 0xf0), b),
            3 => self.command(11 | (op & 0xf0), b),
            1 => {
                let keys = self.command_keys(b);
                let x = b.u8();
                let clock = self.node.clock(worker).0;
                let start = clock + u64::from(x % 8);
                let end = if x >= 0xf8 { start } else { start + 1 + u64::from((x >> 3) % 8) };
                let r = self.node.intent(now, worker, &keys, Clock(start), Clock(end), IntentKind::ReadWrite);
                let outside = keys.iter().copied().find(|k| !self.cfg.layout.contains(*k));
                let want = match (exists, outside) {
                    (false, _) => Err(OpError::InvalidArgument),
                    (true, Some(key)) => Err(OpError::KeyOutsideLayout { key }),
                    (true, None) => Ok(()),
                };
                assert_eq!(r, want, "intent {keys:?} [{start}, {end}) of worker {worker}");
                self.after_input(0);
            }
            2 => {
                let before = self.node.clock(worker);
                let r = self.node.advance_clock(now, worker);
                let want = if exists { Ok(Clock(before.0 + 1)) } else { Err(OpError::InvalidArgument) };
                assert_eq!(r, want, "advance_clock of worker {worker}");
                self.after_input(self.flush_growth());
            }
            _ => {
                // 4
                let want = if exists { Ok(()) } else { Err(OpError::InvalidArgument) };
                match b.u8() % 4 {
                    2 => self.command(12 | (op & 0xf0), b),
                    3 => {
                        let r = self.node.retire(now, worker);
                        assert_eq!(r, want, "retire of worker {worker}");
                        self.after_input(self.flush_growth());
                    }
                    _ => {
                        let r = self.node.end_intents(now, worker);
                        assert_eq!(r, want, "end_intents of worker {worker}");
                        self.after_input(0);
                    }
                }
            }
        }
    }

    /// Registers a uniform distribution over a key range, or a weighted one over a few keys
    /// (either may reach outside the layout), at a conformity level the next byte picks.
    pub(super) fn register_distribution(&mut self, b: &mut Bytes<'_>) {
        let conformity =
            [Conformity::Conform, Conformity::Bounded, Conformity::LongTerm, Conformity::NonConform]
                [usize::from(b.u8() % 4)];
        let shape = b.u8();
        let dist = if shape < 0xc0 {
            Distribution::uniform(small_key(b.u8()), small_key(b.u8()))
        } else {
            let keys: Vec<Key> = (0..shape % 5).map(|_| small_key(b.u8())).collect();
            let weights: Vec<f64> = keys.iter().map(|_| f64::from(b.u8() % 8)).collect();
            Distribution::weighted(&keys, &weights)
        };
        let Ok(dist) = dist else { return };
        let before = self.node.sampling_registry().len();
        let fits = dist.fits(&self.cfg.layout);
        let r = self.node.register_distribution(self.now, dist, conformity);
        let want = if !fits {
            Err(OpError::Sampling(SampleError::BadDistribution))
        } else if before >= self.cfg.sampling.distributions_max {
            Err(OpError::Sampling(SampleError::TooManyDistributions))
        } else {
            Ok(DistId(before as u32))
        };
        assert_eq!(r, want, "register_distribution with {before} registered");
        // One distribution check to each peer.
        self.after_input(growth(0));
    }

    /// Prepares a few samples of one of the first distributions (or of one never registered)
    /// for `worker`, for a window as an intent's.
    pub(super) fn prepare_sample(&mut self, worker: WorkerId, b: &mut Bytes<'_>) {
        let dist = DistId(u32::from(b.u8() % 4));
        let n = u64::from(b.u8() % 16);
        let x = b.u8();
        let clock = self.node.clock(worker).0;
        let start = clock + u64::from(x % 8);
        let end = start + 1 + u64::from((x >> 3) % 8);
        let w = usize::from(worker.0).min(self.samplers.len() - 1);
        let open = self.samplers[w].open_handles();
        let known = (dist.0 as usize) < self.node.sampling_registry().len();
        let r = self.node.prepare_sample(
            self.now,
            &mut self.samplers[w],
            worker,
            dist,
            n,
            Clock(start),
            Clock(end),
        );
        match r {
            Ok(handle) => {
                assert!(worker.0 < WORKERS && known, "prepared for worker {worker}, {dist:?}");
                assert!(n > 0 && n <= self.cfg.sampling.sample_size_max);
                assert_eq!(self.samplers[w].left(handle), Ok(n));
                assert_eq!(self.samplers[w].open_handles(), open + 1);
                assert!(open < self.cfg.sampling.handles_max);
                self.handles.push((w, handle, dist));
            }
            Err(e) => {
                assert_eq!(self.samplers[w].open_handles(), open, "{e}: a handle stayed open");
                if worker.0 >= WORKERS {
                    assert_eq!(e, OpError::InvalidArgument);
                } else if !known {
                    assert_eq!(e, OpError::Sampling(SampleError::UnknownDistribution { dist }));
                }
            }
        }
        // Under relocation the drawn keys are localized at once: two frames per key at most.
        self.after_input(growth(n as usize));
    }

    /// Pulls a few keys of one of the open samples (or of a handle never given out), then
    /// maybe finishes it.
    pub(super) fn pull_sample(&mut self, b: &mut Bytes<'_>) {
        let pick = b.u8();
        let count = usize::from(b.u8() % 5);
        let shape = b.u8();
        let values_len = if shape >= 0xf0 { count * LEN + 1 } else { count * LEN };
        let (w, handle, dist) = match self.handles.get(usize::from(pick) % self.handles.len().max(1)) {
            Some(&(w, h, d)) if pick < 0xf0 => (w, h, Some(d)),
            _ => (usize::from(pick & 1), SampleHandle(1 << 40 | u64::from(pick)), None),
        };
        let known = dist.is_some();
        let left = self.samplers[w].left(handle);
        let mut keys = alloc::vec![Key(u64::MAX); count];
        let r = self.node.pull_sample_keys(&mut self.samplers[w], handle, &mut keys, values_len);
        match r {
            Ok(()) => {
                assert!(known, "pulled from a handle never given out");
                assert_eq!(values_len, count * LEN);
                let reg = dist.and_then(|d| self.node.sampling_registry().get(d).ok());
                for k in &keys {
                    assert!(self.cfg.layout.contains(*k), "sampled {k}, outside the layout");
                    if let Some(reg) = &reg {
                        assert!(reg.dist.probability(*k) > 0.0, "sampled {k}, outside the distribution");
                    }
                }
                assert_eq!(self.samplers[w].left(handle), left.map(|l| l - count as u64));
            }
            Err(e) => {
                if !known {
                    assert_eq!(e, OpError::Sampling(SampleError::UnknownHandle { handle }));
                }
                assert_eq!(self.samplers[w].left(handle), left, "{e}: samples used up");
            }
        }
        if known && shape & 1 == 1 {
            assert_eq!(self.samplers[w].finish(handle), Ok(()));
            self.handles.retain(|(_, h, _)| *h != handle);
        }
        self.after_input(0);
    }
}

//! Instructions per local key access, for callgrind: `PARMA_CALLGRIND=<keys>:<op>:<len>` runs
//! one thread's pulls or pushes of one batch of `KEYS_PER_OP` keys of `len` floats, warm-up
//! first, then [`PROBE_OPS`] operations inside [`Probe::measured`], and nothing else. Under
//! `valgrind --tool=callgrind --toggle-collect='*Probe::measured*'` the instructions collected
//! are those of the measured operations alone (callgrind toggles per thread: the driver
//! threads' sync rounds are not counted); divided by the keys accessed (printed), they are the
//! instructions per local key read or write. `<keys>` is a [`Kind`] name or `plain` (the plain
//! map, length from configuration); `<op>` is `pull` or `push`. `scripts/per-key-instructions`
//! runs every row.

use std::hint::black_box;

use crate::setup::{Kind, Setup};
use crate::{Op, PlainMap, RuntimeLen, KEYS_PER_OP};

/// Operations measured per probe, and run before as warm-up.
const PROBE_OPS: u64 = 20;
const WARM_OPS: u64 = 5;

/// Parses `PARMA_CALLGRIND`; `None` if unset. Panics on a malformed value.
pub fn requested() -> Option<(Option<Kind>, Op, usize)> {
    let spec = std::env::var("PARMA_CALLGRIND").ok()?;
    let usage = "PARMA_CALLGRIND=<plain|home|moved-in|replica|replica25>:<pull|push>:<len>";
    let mut parts = spec.split(':');
    let (Some(keys), Some(op), Some(len), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        panic!("{usage}, not {spec:?}")
    };
    let kind = match keys {
        "plain" => None,
        name => Some(Kind::ALL.into_iter().find(|k| k.name() == name).unwrap_or_else(|| panic!("{usage}"))),
    };
    let op = match op {
        "pull" => Op::Pull,
        "push" => Op::Push,
        _ => panic!("{usage}"),
    };
    let len = len.parse().ok().filter(|l| *l > 0).unwrap_or_else(|| panic!("{usage}"));
    Some((kind, op, len))
}

/// What a probe runs: a worker of node 0 on its batch, or the plain map on the same keys.
enum Probe<'a> {
    Parma(&'a mut Setup),
    Plain(&'a PlainMap<RuntimeLen>, &'a [parma_core::Key]),
}

impl Probe<'_> {
    fn run(&mut self, op: Op, ops: u64, buf: &mut [f32], delta: &[f32]) {
        for _ in 0..ops {
            match self {
                Probe::Parma(s) => {
                    let (w, _) = &mut s.timed[0];
                    let keys = &s.batches[0];
                    match op {
                        Op::Pull => w.pull(keys, black_box(&mut *buf)).unwrap(),
                        Op::Push => {
                            let ticket = w.push(keys, black_box(delta)).unwrap();
                            w.wait(ticket).unwrap();
                        }
                    }
                }
                Probe::Plain(plain, keys) => match op {
                    Op::Pull => plain.pull(keys, black_box(&mut *buf)),
                    Op::Push => plain.push(keys, black_box(delta)),
                },
            }
        }
    }

    /// `run`, under a name of its own for `--toggle-collect`.
    #[inline(never)]
    fn measured(&mut self, op: Op, ops: u64, buf: &mut [f32], delta: &[f32]) {
        self.run(op, ops, buf, delta);
    }
}

/// Runs the probe `PARMA_CALLGRIND` asks for and prints how many keys it measured.
pub fn run(kind: Option<Kind>, op: Op, len: usize) {
    let mut buf = vec![0.0f32; KEYS_PER_OP * len];
    let delta = vec![0.5f32; KEYS_PER_OP * len];
    let name = kind.map_or("plain", Kind::name);
    // The plain map is timed on the keys of the home rows.
    let mut s = Setup::start_len(kind.unwrap_or(Kind::Home), 1, len);
    let keys = s.batches[0].clone();
    let plain = PlainMap::new(RuntimeLen(black_box(len)));
    let mut probe = match kind {
        Some(_) => Probe::Parma(&mut s),
        None => Probe::Plain(&plain, &keys),
    };
    probe.run(op, WARM_OPS, &mut buf, &delta);
    probe.measured(op, PROBE_OPS, &mut buf, &delta);
    let accesses = PROBE_OPS * KEYS_PER_OP as u64;
    if kind.is_some() {
        let stats = s.worker_stats();
        assert_eq!(stats.keys_pulled_remote + stats.keys_pushed_remote, 0, "{name}: an access went remote");
        s.check_state();
    }
    println!("PARMA_CALLGRIND {name} {} len {len}: {accesses} key accesses measured", op.name());
    s.finish();
}

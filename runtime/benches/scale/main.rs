//! The store at scale (issue 44, one machine, one node): for nodes of 10^6 to 10^8 keys of 16
//! `f32` under the dense placement and 10^6 and 10^7 keys spread over the whole `u64` range
//! under the hashed one, the resident memory beyond the values per key (from the OS, and the
//! counting allocator's figure beside it), the time to start the node and to touch every key,
//! and the local pull and push rates (keys per second, 1 and 2 workers, uniform and Zipf(0.99)
//! access) as ratios against the smallest size, measured in paired rounds in the same run.
//!
//! `cargo bench -p parma-runtime --bench scale` (`docs/scale.md`). Sizes by environment:
//! `SCALE_KEYS=1e6,1e7,1e8` (dense; the first is the baseline), `SCALE_HASHED_KEYS=1e6,1e7`.
//! `cargo bench -- --test` runs 10^4 and 10^5 keys with 3 rounds, to check that it runs.
//!
//! `SCALE_ADAPTIVE=1e6,1e7` runs only the rows of four in-process nodes under adaptive
//! management with intent (`adaptive.rs`): key-intents per second and the remote share per
//! model size, `SCALE_ADAPTIVE_STEPS` steps per worker (default 2000).
//!
//! `SCALE_CHECKPOINT=1e7` runs only the checkpoint rows instead: a dense model of that many
//! keys written, restored onto the same node and onto two nodes, against the disk's own
//! sequential write and read of as many bytes (`checkpoint.rs`), in `SCALE_CHECKPOINT_DIR`
//! (default: a directory under the system's temporary one, removed at the end).
//!
//! Each size's build row comes from a process of its own (this bench run again with
//! `SCALE_BUILD_ONE=dense:N` or `hashed:N`), so that its resident memory counts nothing of the
//! sizes before it (freed memory an allocator keeps stays resident); the rates then compare
//! the sizes' nodes in this process, built again.
#![deny(unsafe_code)]

#[allow(unsafe_code)]
#[path = "../../../core/benches/support/counting.rs"]
mod counting;

mod adaptive;
mod build;
mod checkpoint;
mod rates;

use build::{build, Built, Keys, Node};
use rates::{row, Dist, Op};

/// Workers per node (rows use the first one or both).
const WORKERS: u16 = 2;

/// A count written as `1000000`, `1_000_000` or `1e6`.
fn parse_count(s: &str) -> Result<u64, String> {
    let s = s.trim().replace('_', "");
    let bad = || format!("{s:?} is not a key count: write 1000000 or 1e6");
    let n = match s.split_once(['e', 'E']) {
        Some((m, e)) => {
            let (m, e): (u64, u32) = (m.parse().map_err(|_| bad())?, e.parse().map_err(|_| bad())?);
            10u64.checked_pow(e).and_then(|p| p.checked_mul(m)).ok_or_else(bad)?
        }
        None => s.parse().map_err(|_| bad())?,
    };
    if n == 0 {
        return Err(format!("{s:?}: a node needs at least one key"));
    }
    Ok(n)
}

/// The sizes `var` names, or `default`; exits with the error on bad input.
fn sizes(var: &str, default: &[u64]) -> Vec<u64> {
    match std::env::var(var) {
        Err(_) => default.to_vec(),
        Ok(v) => match v.split(',').map(parse_count).collect::<Result<Vec<_>, _>>() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{var}: {e}");
                std::process::exit(2);
            }
        },
    }
}

/// Bytes the OS says it can still give (`MemAvailable`).
fn available() -> u64 {
    let m = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    m.lines()
        .find(|l| l.starts_with("MemAvailable:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(u64::MAX, |kb| kb * 1024)
}

/// Whether `n` keys fit in the memory left while the store fills: the values and 110 B/key
/// beyond them (a hashed store peaks at about 100, a dense one at 24-31 since its tables
/// stage at most an eighth of its keys, `docs/scale.md`), and 1 GiB for the rest; says so
/// when they do not.
fn fits(n: u64) -> bool {
    let need = n.saturating_mul(build::LEN as u64 * 4 + 110).saturating_add(1 << 30);
    if need > available() {
        println!("SKIPPED {n} keys: needs about {} MB, {} MB available", need >> 20, available() >> 20);
        return false;
    }
    true
}

/// The build row of one size, measured in a process of its own (see the module's text).
fn build_row_alone(kind: &str, n: u64) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("this bench's path: {e}"))?;
    let out = std::process::Command::new(exe)
        .env("SCALE_BUILD_ONE", format!("{kind}:{n}"))
        .output()
        .map_err(|e| format!("running the {kind} build of {n} keys: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "the {kind} build of {n} keys ended with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    print!("{}", String::from_utf8_lossy(&out.stdout));
    Ok(())
}

/// In the child of [`build_row_alone`]: builds the one node `spec` names and prints its row.
fn build_one(spec: &str) -> Result<(), String> {
    let (kind, n) = spec.split_once(':').ok_or_else(|| format!("SCALE_BUILD_ONE={spec:?}: write dense:N"))?;
    let keys = match kind {
        "dense" => Keys::Dense(parse_count(n)?),
        "hashed" => Keys::Hashed(parse_count(n)?),
        _ => return Err(format!("SCALE_BUILD_ONE={spec:?}: the kind is dense or hashed")),
    };
    let (node, built) = build(keys, WORKERS);
    built.print();
    node.finish();
    Ok(())
}

fn measure(what: &str, kind: &str, sizes: &[u64], keys: fn(u64) -> Keys, rounds: usize, ops: usize) {
    println!(
        "\n== {what}: build, one process per size (B/key: beyond the {} B of values) ==",
        build::LEN * 4
    );
    Built::print_header();
    let sizes: Vec<u64> = sizes.iter().copied().filter(|&n| fits(n)).collect();
    for &n in &sizes {
        if let Err(e) = build_row_alone(kind, n) {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
    let mut nodes: Vec<Node> = sizes.iter().map(|&n| build(keys(n), WORKERS).0).collect();
    let names: Vec<String> = nodes.iter().map(|n| format!("{:.0e}", n.keys.n() as f64)).collect();
    println!(
        "\n== {what}: local rates, keys/s (median of {rounds} paired rounds of {ops} ops of {} keys per worker); \
         ratio = rate(N)/rate({}), median [quartiles] ==",
        rates::KEYS_PER_OP,
        names.first().map_or("-", |s| s.as_str())
    );
    let mut head = format!("{:<8} {:<5} {:>7}", "access", "op", "workers");
    for (i, n) in names.iter().enumerate() {
        head += &format!(" {:>10}", format!("{n} rate"));
        if i > 0 {
            head += &format!(" {:>20}", format!("{n} ratio"));
        }
    }
    println!("{head}");
    for dist in [Dist::Uniform, Dist::Zipf] {
        for threads in [1, 2] {
            for op in [Op::Pull, Op::Push] {
                let r = row(&mut nodes, dist, op, threads, rounds, ops);
                let mut line = format!("{:<8} {:<5} {threads:>7}", format!("{dist:?}"), format!("{op:?}"));
                for (i, rate) in r.rates.iter().enumerate() {
                    line += &format!(" {:>10.3e}", rate);
                    if let Some(q) = i.checked_sub(1).map(|j| &r.ratios[j]) {
                        let at = |f: f64| q[((q.len() - 1) as f64 * f).round() as usize];
                        line +=
                            &format!(" {:>20}", format!("{:.2}x [{:.2}-{:.2}]", at(0.5), at(0.25), at(0.75)));
                    }
                }
                println!("{line}");
            }
        }
    }
    for n in nodes {
        n.finish();
    }
}

fn main() {
    if let Ok(spec) = std::env::var("SCALE_BUILD_ONE") {
        if let Err(e) = build_one(&spec) {
            eprintln!("{e}");
            std::process::exit(2);
        }
        return;
    }
    let quick = std::env::args().any(|a| a == "--test");
    // A directory of the user's is kept; the default one is removed once empty.
    let own_dir = std::env::var_os("SCALE_CHECKPOINT_DIR").is_none();
    let ck_dir =
        std::env::var_os("SCALE_CHECKPOINT_DIR").map(std::path::PathBuf::from).unwrap_or_else(|| {
            std::env::temp_dir().join(format!("parma-scale-checkpoint-{}", std::process::id()))
        });
    let remove_own = || {
        if own_dir {
            let _ = std::fs::remove_dir(&ck_dir);
        }
    };
    if std::env::var_os("SCALE_ADAPTIVE").is_some() {
        let steps = match std::env::var("SCALE_ADAPTIVE_STEPS").map(|v| v.trim().parse::<usize>()) {
            Err(_) => 2000,
            Ok(Ok(s)) if s > 0 => s,
            Ok(_) => {
                eprintln!("SCALE_ADAPTIVE_STEPS: a positive number of steps per worker");
                std::process::exit(2);
            }
        };
        let sizes: Vec<u64> = sizes("SCALE_ADAPTIVE", &[]).into_iter().filter(|&n| fits(n)).collect();
        adaptive::measure(&sizes, steps);
        return;
    }
    if let Ok(v) = std::env::var("SCALE_CHECKPOINT") {
        match parse_count(&v) {
            Ok(n) if fits(n) => checkpoint::measure(n, &ck_dir),
            Ok(_) => {}
            Err(e) => {
                eprintln!("SCALE_CHECKPOINT: {e}");
                std::process::exit(2);
            }
        }
        remove_own();
        return;
    }
    let (dense, hashed, rounds, ops) = if quick {
        (vec![10_000, 100_000], vec![10_000, 100_000], 3, 10)
    } else {
        (
            sizes("SCALE_KEYS", &[1_000_000, 10_000_000]),
            sizes("SCALE_HASHED_KEYS", &[1_000_000, 10_000_000]),
            21,
            100,
        )
    };
    println!("one node, {} f32 per key, {WORKERS} workers; rss from /proc/self/status (VmRSS), alloc from a counting allocator", build::LEN);
    measure("dense", "dense", &dense, Keys::Dense, rounds, ops);
    measure("hashed (keys over the whole u64 range)", "hashed", &hashed, Keys::Hashed, rounds, ops);
    if quick {
        adaptive::measure(&[10_000, 100_000], 20);
        checkpoint::measure(10_000, &ck_dir);
        remove_own();
    }
}

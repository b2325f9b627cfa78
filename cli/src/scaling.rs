//! `parma scaling`: the skewed workloads of `parma techniques` at several cluster sizes with the
//! same work per node (weak scaling, [`skew::weak_scaled`]), and per node and per step what
//! each size sent, how many accesses were remote, and how large every node's tables grew.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use parma_conformance::skew::{self, SkewOptions, SkewReport};
use parma_core::Technique;

/// One run: a technique at a cluster size, or why it was not run.
pub struct ScalingRow {
    /// The technique.
    pub technique: Technique,
    /// The options it ran with (the scaled workload).
    pub opts: SkewOptions,
    /// What it measured and the simulator's wall time, or why it was skipped.
    pub outcome: Result<(SkewReport, Duration), String>,
}

/// Bytes a node needs for every key it holds as a full replica: the value and the unsent
/// delta (`len` floats each) and about 64 bytes of slot and record.
fn full_replica_bytes(o: &SkewOptions) -> u64 {
    u64::from(o.nodes) * o.task.keys() * (8 * u64::from(o.len) + 64)
}

/// Runs each task of `base` (sized for `base.nodes` nodes) at each of `sizes` nodes under each
/// of `techniques`. Full replication is skipped where every node holding every key would need
/// more than `memory_max_bytes` over the cluster (the row says how much). `progress` hears of
/// every run as it ends.
pub fn run(
    base: &[SkewOptions],
    sizes: &[u16],
    techniques: &[Technique],
    memory_max_bytes: u64,
    progress: &mut dyn FnMut(&ScalingRow),
) -> Result<Vec<ScalingRow>, String> {
    if sizes.is_empty() || techniques.is_empty() {
        return Err("name at least one cluster size (--sizes) and one technique".into());
    }
    let mut rows = Vec::new();
    for b in base {
        for &t in techniques {
            for &n in sizes {
                let opts = skew::weak_scaled(b, n)?;
                let need = full_replica_bytes(&opts);
                let outcome = if t == Technique::FullReplication && need > memory_max_bytes {
                    Err(format!(
                        "skipped: every node holding all {} keys needs about {:.2} GB over the cluster, \
                         over the limit of {:.1} GB (--memory-max-gb)",
                        opts.task.keys(),
                        need as f64 / 1e9,
                        memory_max_bytes as f64 / 1e9
                    ))
                } else {
                    let began = Instant::now();
                    skew::run(&opts, t).map(|r| (r, began.elapsed()))
                };
                // A failed run (a violation, a wrong value) ends the command: no table of
                // figures from a run that broke.
                if let Err(e) = &outcome {
                    if !e.starts_with("skipped") {
                        return Err(e.clone());
                    }
                }
                let row = ScalingRow { technique: t, opts, outcome };
                progress(&row);
                rows.push(row);
            }
        }
    }
    Ok(rows)
}

/// Per node and per step (one step of each of the node's workers): bytes and messages sent.
pub fn per_node_step(r: &SkewReport, o: &SkewOptions) -> (f64, f64) {
    let d = f64::from(o.nodes) * f64::from(o.steps);
    (r.bytes_sent as f64 / d, r.messages_sent as f64 / d)
}

/// The tables of `rows`, one pair per task: traffic per node and per step, with its ratio to
/// the technique's first size, and the high-water marks of the nodes' tables.
pub fn tables(rows: &[ScalingRow]) -> String {
    let mut out = String::new();
    let mut tasks: Vec<&'static str> = rows.iter().map(|r| r.opts.task.name()).collect();
    tasks.dedup();
    for task in tasks {
        let mine: Vec<&ScalingRow> = rows.iter().filter(|r| r.opts.task.name() == task).collect();
        let _ = writeln!(out, "### {task}: traffic per node and per step\n");
        out.push_str(
            "| technique | nodes | keys | bytes / node / step | vs first size | messages / node / step \
             | vs first size | remote share | virtual time | wall time |\n\
             | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        );
        for r in &mine {
            let first = mine.iter().find(|f| f.technique == r.technique && f.outcome.is_ok());
            traffic_row(&mut out, r, first.copied());
        }
        let _ = writeln!(out, "\n### {task}: each table at its largest on any node\n");
        out.push_str(
            "| technique | nodes | key records | cold records | pointers | replicas | keys with holders \
             | holder entries | longest holder list | pending requests | outbox | arrived | touched \
             | owner updates | peer slots | store MB | frames in flight (cluster) |\n\
             | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        );
        for r in &mine {
            tables_row(&mut out, r);
        }
        out.push('\n');
    }
    out
}

fn traffic_row(out: &mut String, r: &ScalingRow, first: Option<&ScalingRow>) {
    let (name, nodes, keys) = (r.technique.name(), r.opts.nodes, r.opts.task.keys());
    let (rep, wall) = match &r.outcome {
        Ok(x) => x,
        Err(e) => {
            let _ = writeln!(out, "| {name} | {nodes} | {keys} | {e} | | | | | | |");
            return;
        }
    };
    let (b, m) = per_node_step(rep, &r.opts);
    let (b0, m0) = match first.map(|f| (&f.outcome, &f.opts)) {
        Some((Ok((f, _)), o)) => per_node_step(f, o),
        _ => (b, m),
    };
    let _ = writeln!(
        out,
        "| {name} | {nodes} | {keys} | {b:.0} | {:.2}× | {m:.2} | {:.2}× | {} | {:.0} ms | {:.1} s |",
        b / b0.max(f64::MIN_POSITIVE),
        m / m0.max(f64::MIN_POSITIVE),
        share(rep.remote_accesses, rep.key_accesses),
        rep.run_time_us as f64 / 1000.0,
        wall.as_secs_f64(),
    );
}

fn tables_row(out: &mut String, r: &ScalingRow) {
    let (name, nodes) = (r.technique.name(), r.opts.nodes);
    let Ok((rep, _)) = &r.outcome else {
        let _ = writeln!(out, "| {name} | {nodes} | skipped | | | | | | | | | | | | | | |");
        return;
    };
    let t = &rep.tables_max;
    let _ = writeln!(
        out,
        "| {name} | {nodes} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {} |",
        t.key_records,
        t.cold_records,
        t.pointers,
        t.replicas,
        t.keys_with_holders,
        t.holder_entries,
        t.holders_longest,
        t.pending_requests,
        t.outbox_frames,
        t.arrived,
        t.touched,
        t.owner_updates,
        t.peer_slots,
        t.store_bytes as f64 / 1e6,
        rep.in_flight_max,
    );
}

/// `a / b` as a percentage (0 % without accesses), with digits for tiny shares.
fn share(a: u64, b: u64) -> String {
    if a == 0 || b == 0 {
        return "0 %".into();
    }
    let p = 100.0 * a as f64 / b as f64;
    if p >= 0.1 {
        format!("{p:.1} %")
    } else {
        format!("{p:.2e} %")
    }
}

/// Parses a list of cluster sizes (`16,64,256`): each 1 to `parma_core::config::NODES_MAX`,
/// in increasing order, without repeats.
pub fn parse_sizes(list: &str) -> Result<Vec<u16>, String> {
    let max = parma_core::config::NODES_MAX;
    let mut sizes = Vec::new();
    for part in list.split(',') {
        let part = part.trim();
        let n: u16 =
            part.parse().ok().filter(|n| (1..=max).contains(n)).ok_or_else(|| {
                format!("`{part}` is not a cluster size: sizes are whole numbers 1 to {max}")
            })?;
        if sizes.last().is_some_and(|last| *last >= n) {
            return Err(format!("cluster sizes go up without repeats, and {n} does not: {list}"));
        }
        sizes.push(n);
    }
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use parma_conformance::skew::{Kge, Mf, Task};

    #[test]
    fn sizes_parse_or_say_why_not() {
        assert_eq!(parse_sizes("16,64,256"), Ok(vec![16, 64, 256]));
        assert_eq!(parse_sizes(" 8"), Ok(vec![8]));
        for bad in ["", "0", "16,x", "64,16", "16,16", "5000", "-1"] {
            let e = parse_sizes(bad).unwrap_err();
            assert!(e.contains("size"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_key_space_scales_with_the_nodes() {
        let kge = SkewOptions::new(Task::Kge(Kge::default()));
        let Task::Kge(k) = skew::weak_scaled(&kge, 64).unwrap().task else { panic!() };
        assert_eq!((k.entities, k.relations), (400_000, 200));
        let mf = SkewOptions::new(Task::Mf(Mf::default()));
        let Task::Mf(m) = skew::weak_scaled(&mf, 16).unwrap().task else { panic!() };
        assert_eq!((m.rows, m.cols), (64_000, 16_000));
        assert!(skew::weak_scaled(&mf, 0).is_err());
        assert!(skew::weak_scaled(&mf, 5000).is_err());
    }

    /// 16 nodes, a few steps, on both tasks under adaptive management and static
    /// partitioning: the runs check every node's invariants and every key's value (an error
    /// here fails the test), and the figures are the exact counts the report derives from.
    #[test]
    fn sixteen_nodes_run_clean_and_count_exactly() {
        // Every node's invariants are checked every 50 simulation steps as well as at the end.
        let small = |task| SkewOptions {
            nodes: 4,
            steps: 20,
            ahead: 4,
            warmup_us: 1_000,
            check_every: 50,
            ..SkewOptions::new(task)
        };
        let base = [
            small(Task::Kge(Kge { entities: 2_000, relations: 20, ..Kge::default() })),
            small(Task::Mf(Mf { rows: 800, cols: 400, ..Mf::default() })),
        ];
        let techniques = [Technique::Adaptive, Technique::StaticPartitioning, Technique::FullReplication];
        let rows = run(&base, &[16], &techniques, 1 << 20, &mut |_| {}).unwrap();
        assert_eq!(rows.len(), 6);
        for r in &rows {
            if r.technique == Technique::FullReplication {
                // 16 nodes × 8,020 keys × 192 B is over the 1 MiB given: skipped, saying so.
                let e = r.outcome.as_ref().expect_err("full replication is skipped");
                assert!(e.starts_with("skipped") && e.contains("GB"), "{e}");
                continue;
            }
            let (rep, _) = r.outcome.as_ref().unwrap();
            let plan = skew::Plan::new(&r.opts.task, 16 * 2, 20, r.opts.seed);
            assert_eq!(rep.key_accesses, plan.key_accesses(), "{}", r.technique.name());
            let (b, m) = per_node_step(rep, &r.opts);
            assert_eq!(b, rep.bytes_sent as f64 / 320.0);
            assert_eq!(m, rep.messages_sent as f64 / 320.0);
            let t = &rep.tables_max;
            assert_eq!(t.peer_slots, 32, "flushed clocks and barrier entries: 16 each");
            assert!(t.holders_longest < 16, "a key has at most 15 holders besides its owner");
            match r.technique {
                Technique::StaticPartitioning => {
                    assert!(rep.remote_accesses > 0 && t.replicas == 0 && t.holder_entries == 0);
                    assert_eq!(rep.relocations, 0);
                }
                _ => assert!(t.key_records > 0 && t.store_bytes > 0),
            }
        }
        let out = tables(&rows);
        assert!(out.contains("### kge: traffic per node and per step"), "{out}");
        assert!(out.contains("| adaptive | 16 | 8020 |"), "{out}");
        assert!(out.contains("| full-replication | 16 | 8020 | skipped"), "{out}");
    }
}

//! Counters and manifests as Python dicts.

use parma::checkpoint::Manifest;
use parma::{Stats, WorkerStats};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

macro_rules! fields {
    ($py:expr, $s:expr, [$($f:ident),* $(,)?]) => {{
        let d = PyDict::new($py);
        $( d.set_item(stringify!($f), $s.$f)?; )*
        d
    }};
}

pub fn worker<'py>(py: Python<'py>, s: &WorkerStats) -> PyResult<Bound<'py, PyDict>> {
    Ok(fields!(
        py,
        s,
        [keys_pulled_local, keys_pulled_remote, keys_pushed_local, keys_pushed_remote, commands_waited]
    ))
}

/// A node's counters: `node` (the protocol's), `driver`, `transport`, `workers` (a list).
pub fn node<'py>(py: Python<'py>, s: &Stats) -> PyResult<Bound<'py, PyDict>> {
    let n = &s.node;
    let nd = fields!(
        py,
        n,
        [
            keys_pulled_remote,
            keys_pushed_remote,
            keys_served_late_local,
            keys_served_for_peers,
            keys_forwarded,
            keys_waited,
            relocations_in,
            relocations_out,
            messages_sent,
            bytes_sent,
            messages_received,
            bytes_received,
            frames_rejected,
            frames_foreign,
            frames_other_epoch,
            from_non_members,
            messages_rejected,
            messages_undeliverable,
            messages_refused,
            replies_late,
            ops_failed,
            moves_refused,
            installs_failed,
            installs_sent_home,
            hops_max,
            intents_signaled,
            sample_intent_keys,
            distribution_mismatches,
            intent_keys_signaled,
            intents_expired_unacted,
            intent_starts,
            intent_ends,
            starts_deferred,
        ]
    );
    nd.set_item("intents_by_kind", n.intents_by_kind.to_vec())?;
    let d = &s.driver;
    let dd = fields!(
        py,
        d,
        [
            frames_received,
            frames_sent,
            bytes_sent,
            sends_blocked,
            frames_dropped,
            commands,
            completions,
            completions_orphaned,
            peers_failed,
            parks,
            intents_dropped,
        ]
    );
    let t = &s.transport;
    let td = fields!(
        py,
        t,
        [
            frames_sent,
            bytes_sent,
            frames_received,
            bytes_received,
            packets_sent,
            wire_bytes_sent,
            frames_retransmitted,
            duplicates_dropped,
            reconnects,
            connects_failed,
            handshakes_timed_out,
            session_refusals,
            strangers_refused,
            sends_blocked,
            peers_failed,
        ]
    );
    let workers = PyList::empty(py);
    for w in &s.workers {
        workers.append(worker(py, w)?)?;
    }
    let out = PyDict::new(py);
    out.set_item("node", nd)?;
    out.set_item("driver", dd)?;
    out.set_item("transport", td)?;
    out.set_item("workers", workers)?;
    Ok(out)
}

pub fn manifest<'py>(py: Python<'py>, m: &Manifest) -> PyResult<Bound<'py, PyDict>> {
    let d = fields!(py, m, [key_end, value_len, value_len_max, seed, nodes, workers_per_node, version]);
    d.set_item("technique", &m.technique)?;
    d.set_item("placement", &m.placement)?;
    d.set_item("keys", m.keys())?;
    d.set_item("parts", m.parts.len())?;
    d.set_item("extra", m.extra.clone())?;
    Ok(d)
}

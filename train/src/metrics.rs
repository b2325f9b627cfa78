//! `--metrics-addr`: a node's counters in Prometheus's text exposition format, over plain
//! HTTP. One request at a time, each bounded in size and time; the server stops with the node.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parma::{NodeRuntime, Stats};

/// Most bytes of a request read before answering.
const REQUEST_MAX: usize = 8192;
/// Longest a client may take to send its request or read the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the accept loop looks at `stop`.
const POLL: Duration = Duration::from_millis(50);

/// The counters of `stats` (node `node`) in the text format.
pub fn render(node: u16, stats: &Stats) -> String {
    let (n, t, d, w) = (&stats.node, &stats.transport, &stats.driver, stats.workers_total());
    let mut out = String::new();
    let mut counter = |name: &str, help: &str, v: u64| {
        let _ = writeln!(out, "# HELP parma_{name} {help}\n# TYPE parma_{name} counter");
        let _ = writeln!(out, "parma_{name}{{node=\"{node}\"}} {v}");
    };
    counter(
        "keys_pulled_local_total",
        "Keys pulled from this node's store by its workers.",
        w.keys_pulled_local,
    );
    counter(
        "keys_pulled_remote_total",
        "Keys pulled that this node's workers handed to the node.",
        w.keys_pulled_remote,
    );
    counter(
        "keys_pushed_local_total",
        "Keys pushed into this node's store by its workers.",
        w.keys_pushed_local,
    );
    counter(
        "keys_pushed_remote_total",
        "Keys pushed that this node's workers handed to the node.",
        w.keys_pushed_remote,
    );
    counter("relocations_in_total", "Keys moved to this node.", n.relocations_in);
    counter("replicas_created_total", "Replicas created on this node.", n.replicas_created);
    counter("ops_failed_total", "Worker operations that ended with an error.", n.ops_failed);
    counter("messages_sent_total", "Protocol messages sent.", n.messages_sent_total());
    counter("message_bytes_sent_total", "Bytes of the protocol messages sent.", n.bytes_sent_total());
    counter(
        "driver_frames_dropped_total",
        "Frames the driver dropped (peer gone, refused).",
        d.frames_dropped,
    );
    counter("transport_frames_sent_total", "Frames the transport accepted.", t.frames_sent);
    counter("transport_bytes_sent_total", "Bytes of the frames the transport accepted.", t.bytes_sent);
    counter("transport_frames_received_total", "Frames the transport handed to the node.", t.frames_received);
    counter("transport_bytes_received_total", "Bytes of those frames.", t.bytes_received);
    counter("transport_wire_bytes_sent_total", "Bytes put on the wire.", t.wire_bytes_sent);
    counter("transport_retransmitted_total", "Frames sent again.", t.frames_retransmitted);
    counter("transport_duplicates_dropped_total", "Frames received twice and dropped.", t.duplicates_dropped);
    counter("transport_reconnects_total", "Connections to peers opened again.", t.reconnects);
    counter("transport_connects_failed_total", "Connection attempts that failed.", t.connects_failed);
    counter(
        "transport_session_refusals_total",
        "Packets a peer's session refused on an authenticated link or in its own handshake.",
        t.session_refusals,
    );
    counter(
        "transport_strangers_refused_total",
        "Connections refused before they proved the token (wrong digest, token or node id, and the like).",
        t.strangers_refused,
    );
    counter("transport_sends_blocked_total", "Sends answered with back-pressure.", t.sends_blocked);
    counter("transport_peers_failed_total", "Peers reported failed.", t.peers_failed);
    out
}

/// Serves `node`'s counters on `addr` until `stop` is set. Errors are logged, not fatal: the
/// node runs on without its metrics.
pub fn serve(addr: &str, node: &NodeRuntime, stop: &AtomicBool) {
    match TcpListener::bind(addr) {
        Ok(l) => serve_on(l, node, stop),
        Err(e) => eprintln!("metrics: cannot listen on {addr}: {e}"),
    }
}

/// [`serve`] on a listener already bound.
pub fn serve_on(listener: TcpListener, node: &NodeRuntime, stop: &AtomicBool) {
    if let Err(e) = listener.set_nonblocking(true) {
        eprintln!("metrics: {e}");
        return;
    }
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((mut conn, _)) => {
                let _ = conn.set_nonblocking(false);
                let _ = conn.set_read_timeout(Some(CLIENT_TIMEOUT));
                let _ = conn.set_write_timeout(Some(CLIENT_TIMEOUT));
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                // Read the request head (bounded); what it asks for does not matter.
                while req.len() < REQUEST_MAX && !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let body = render(node.id().0, &node.stats());
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes()).and_then(|()| conn.write_all(body.as_bytes()));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parma::local_transports::{threaded_cluster as cluster, ThreadedOptions};
    use parma::{Config, Key, Layout, NodeId};

    #[test]
    fn a_scrape_gets_the_node_counters_in_the_text_format() {
        let cfg = Config::new(1, 1, Layout::uniform(100, 2).expect("layout"));
        let t = cluster(1, ThreadedOptions::default()).pop().expect("one end");
        let (node, mut workers) = NodeRuntime::start(cfg, NodeId(0), t).expect("starts");
        let mut w = workers.pop().expect("one worker");
        let keys: Vec<Key> = (0..10).map(Key).collect();
        let ticket = w.push(&keys, &[1.0; 20]).expect("push");
        w.wait(ticket).expect("pushed");
        let listener = TcpListener::bind("127.0.0.1:0").expect("binds");
        let addr = listener.local_addr().expect("address");
        let stop = AtomicBool::new(false);
        let body = std::thread::scope(|s| {
            s.spawn(|| serve_on(listener, &node, &stop));
            let mut conn = std::net::TcpStream::connect(addr).expect("connects");
            conn.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
            conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").expect("request");
            let mut body = String::new();
            let _ = conn.read_to_string(&mut body);
            stop.store(true, Ordering::SeqCst);
            body
        });
        assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
        assert!(body.contains("# TYPE parma_keys_pushed_local_total counter"), "{body}");
        assert!(body.contains("parma_keys_pushed_local_total{node=\"0\"} 10"), "{body}");
        assert!(body.contains("parma_transport_reconnects_total{node=\"0\"} 0"), "{body}");
        w.finalize().expect("finalize");
        node.shutdown().expect("shutdown");
    }
}

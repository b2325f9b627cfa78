//! Issue 16, fault 4: a stranger that completes the ZMTP handshake and then claims a frame of
//! 4 GiB (the long-frame flag 0x02 and 8 bytes of length). The node drops the connection
//! when it reads the header, before it reserves anything for the body; the cluster keeps
//! exchanging frames. Alone in its binary, so that the process's memory high-water mark is
//! this test's.
//!
//! `cargo test --release -p parma-transport-zmq --test stranger_claims -- --nocapture`
#![forbid(unsafe_code)]

mod support;

use std::io::Write;
use std::time::Duration;

use support::stranger::{closed_within, long_frame_header, zmtp_connect};
use support::{busy_cluster, memory, socket_addr};

const MIB: u64 = 1024;

#[test]
fn a_claimed_4_gib_frame_ends_its_connection_before_memory_is_reserved() {
    let ((before, after, closed), stats) = busy_cluster(3, |c| {
        let addr = socket_addr(&c.endpoints[1]);
        let before = memory();
        let mut closed = Vec::new();
        for claim in [4u64 << 30, 1 << 40, u64::MAX] {
            let mut s = zmtp_connect(addr).expect("the stranger's ZMTP handshake");
            let _ = s.write_all(&long_frame_header(claim));
            let _ = s.write_all(&[0x5a; 64 << 10]);
            closed.push(closed_within(&mut s, Duration::from_secs(2)));
        }
        std::thread::sleep(Duration::from_millis(200));
        (before, memory(), closed)
    });
    eprintln!("claims of 4 GiB, 1 TiB, 2^64-1 bytes: closed {closed:?}");
    eprintln!("memory before {before:?}, after {after:?}");
    eprintln!("node 1: {:?}", stats[1]);
    assert!(closed.iter().all(|c| *c), "a connection claiming a huge frame stayed open: {closed:?}");
    let peak = after.hwm_kib.saturating_sub(before.hwm_kib.max(before.rss_kib));
    assert!(peak < 64 * MIB, "the resident high-water mark grew by {peak} KiB");
    let reserved = after.size_kib.saturating_sub(before.size_kib);
    assert!(reserved < 256 * MIB, "the address space grew by {reserved} KiB");
}

//! The vendored `zeromq` decoder reads a frame body of 16 KiB or more into storage of its own
//! (`vendor/zeromq/PATCHED.md`, "Large bodies"). A client writing ZMTP by hand to a plain
//! ROUTER on 127.0.0.1 cuts its bytes at the places that path has to get right: inside a
//! frame's header, right after it, inside a large body, one byte at a time, and several
//! frames in one write. Every message arrives whole; a connection that ends inside a large
//! body delivers nothing of it, and the ROUTER keeps serving the next client.
#![forbid(unsafe_code)]

mod support;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use support::stranger::zmtp_connect;
use zeromq::{RouterSocket, Socket, SocketOptions, SocketRecv, ZmqMessage};

/// Part lengths on both sides of the decoder's 16 KiB bound, and far above it.
const LENS: [usize; 9] = [0, 1, 255, 256, 16 * 1024 - 1, 16 * 1024, 20_000, 64 << 10, 300_000];

fn part(msg: usize, i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (msg * 31 + i * 7 + j) as u8).collect()
}

/// The ZMTP bytes of one message with these parts.
fn encode(parts: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let more = u8::from(i + 1 < parts.len());
        if p.len() > 255 {
            out.push(0x02 | more);
            out.extend_from_slice(&(p.len() as u64).to_be_bytes());
        } else {
            out.extend_from_slice(&[more, p.len() as u8]);
        }
        out.extend_from_slice(p);
    }
    out
}

/// Writes `bytes` cut at `cuts` (offsets into it), pausing after each piece so that the
/// reader sees the pieces in separate reads.
fn write_cut(s: &mut TcpStream, bytes: &[u8], cuts: &[usize]) {
    let mut at = 0;
    for &c in cuts.iter().chain(std::iter::once(&bytes.len())) {
        let c = c.clamp(at, bytes.len());
        s.write_all(&bytes[at..c]).expect("the client writes");
        s.flush().expect("the client flushes");
        std::thread::sleep(Duration::from_millis(3));
        at = c;
    }
}

/// The messages: every length alone, then pairs of a small and a large part.
fn messages() -> Vec<Vec<Vec<u8>>> {
    let mut out: Vec<Vec<Vec<u8>>> = LENS.iter().enumerate().map(|(m, &l)| vec![part(m, 0, l)]).collect();
    for (k, &l) in LENS.iter().enumerate().skip(4) {
        let m = out.len();
        out.push(vec![part(m, 0, 40 + k), part(m, 1, l)]);
    }
    out
}

/// Where to cut a message's bytes: nowhere, inside and right after the first header, in the
/// middle of the last part, and one byte at a time over the first 40 bytes and around the
/// last part's start.
fn cuts(bytes: &[u8], last_part: usize, style: usize) -> Vec<usize> {
    let start = bytes.len() - last_part;
    match style {
        0 => vec![],
        1 => vec![1, 5, 9, start + last_part / 2],
        2 => (1..40).chain(start.saturating_sub(12)..start + 12).collect(),
        _ => vec![start, start + 1, start + 4096, start + 16 * 1024],
    }
}

#[test]
fn messages_cut_anywhere_arrive_whole() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let mut so = SocketOptions::default();
    so.max_message_size(1 << 20);
    let mut router = RouterSocket::with_options(so);
    let ep = rt.block_on(router.bind("tcp://127.0.0.1:0")).expect("the ROUTER binds").to_string();
    let addr = ep.trim_start_matches("tcp://").parse().expect("a socket address");
    let msgs = messages();

    let writer = {
        let msgs = msgs.clone();
        std::thread::spawn(move || {
            for style in 0..4 {
                let mut s = zmtp_connect(addr).expect("the client's ZMTP handshake");
                s.set_nodelay(true).expect("no delay");
                for m in &msgs {
                    let bytes = encode(m);
                    write_cut(&mut s, &bytes, &cuts(&bytes, m.last().map_or(0, Vec::len), style));
                }
                // All of one message and the start of the next in one write.
                let (a, b) = (encode(&msgs[7]), encode(&msgs[8]));
                let both = [a.as_slice(), &b[..b.len() / 3]].concat();
                write_cut(&mut s, &both, &[]);
                write_cut(&mut s, &b[b.len() / 3..], &[]);
            }
            // A connection that ends 1,000 bytes into a 300,000-byte body.
            let mut s = zmtp_connect(addr).expect("the client's ZMTP handshake");
            let bytes = encode(&msgs[8]);
            write_cut(&mut s, &bytes[..9 + 1000], &[]);
        })
    };

    rt.block_on(async {
        for style in 0..4 {
            for (i, m) in msgs.iter().chain([&msgs[7], &msgs[8]]).enumerate() {
                let got = tokio::time::timeout(Duration::from_secs(10), router.recv())
                    .await
                    .unwrap_or_else(|_| panic!("style {style}, message {i}: nothing within 10 s"))
                    .expect("the ROUTER receives");
                let parts: Vec<_> = got.into_vecdeque().into_iter().skip(1).collect();
                assert_eq!(parts.len(), m.len(), "style {style}, message {i}: parts");
                for (k, (p, want)) in parts.iter().zip(m).enumerate() {
                    assert_eq!(p.len(), want.len(), "style {style}, message {i}, part {k}: length");
                    assert!(p.as_ref() == want.as_slice(), "style {style}, message {i}, part {k}: bytes");
                }
            }
        }
        // The truncated body yields no message.
        let late = tokio::time::timeout(Duration::from_millis(500), router.recv()).await;
        assert!(late.is_err(), "a message from a connection that ended inside a body: {late:?}");
    });
    writer.join().expect("the writer");

    // The ROUTER still serves a client that comes after.
    let m = vec![part(99, 0, 70_000)];
    let bytes = encode(&m);
    let last = std::thread::spawn(move || {
        let mut s = zmtp_connect(addr).expect("the client's ZMTP handshake");
        write_cut(&mut s, &bytes, &[100]);
        s
    });
    rt.block_on(async {
        let got: ZmqMessage = tokio::time::timeout(Duration::from_secs(10), router.recv())
            .await
            .expect("the last client's message within 10 s")
            .expect("the ROUTER receives");
        assert_eq!(got.get(1).map(|b| b.to_vec()), Some(m[0].clone()));
    });
    drop(last.join().expect("the last client"));
}

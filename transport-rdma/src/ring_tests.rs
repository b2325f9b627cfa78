use super::*;

/// A sender and a receiver of one ring, the sender honouring the receiver's credits: every
/// record lands where the sender put it, none crosses the end, none overwrites one in use.
#[test]
fn sender_and_receiver_agree_on_every_record() {
    let cap = 1000;
    let mut tx = SendRing::new(cap);
    let mut rx = RecvRing::new(cap, 64);
    let mut held: VecDeque<Record> = VecDeque::new();
    let mut x = 12345u64;
    for i in 0..20_000u32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % 501) as usize; // up to half the ring
        if let Some((start, wrapped)) = tx.fits(len, rx.tail).filter(|_| rx.held() < 64) {
            tx.advance(start, len);
            let r = rx.arrive(imm(len as u32, wrapped, i % 3 == 0)).expect("an honest record");
            assert_eq!((r.off, r.len, r.last), (tx.off(start), len, i % 3 == 0));
            assert!(r.off + r.len <= cap, "a record crosses the end");
            for h in &held {
                let apart = r.off + r.len <= h.off || h.off + h.len <= r.off;
                assert!(apart || r.len == 0 || h.len == 0, "{r:?} overlaps {h:?}, still in use");
            }
            held.push_back(r);
        }
        // Free some, out of order now and then.
        if x % 4 == 0 && held.len() > 1 {
            let r = held.remove(1).expect("two held");
            rx.release(r.seq);
        } else if x % 2 == 0 {
            if let Some(r) = held.pop_front() {
                rx.release(r.seq);
            }
        }
    }
    while let Some(r) = held.pop_front() {
        rx.release(r.seq);
    }
    assert_eq!(rx.held(), 0);
    assert_eq!(rx.tail, tx.head);
}

#[test]
fn a_record_that_would_cross_the_end_starts_the_next_lap() {
    assert_eq!(place(90, 100, 10), (90, false));
    assert_eq!(place(91, 100, 10), (100, true));
    assert_eq!(place(250, 100, 0), (250, false));
    let mut rx = RecvRing::new(100, 8);
    assert_eq!(rx.arrive(imm(40, false, true)).unwrap().off, 0);
    assert_eq!(rx.arrive(imm(45, false, true)).unwrap().off, 40);
    assert!(rx.arrive(imm(20, true, true)).is_err(), "no room until the first is freed");
    rx.release(0);
    let r = rx.arrive(imm(20, true, true)).unwrap();
    assert_eq!((r.off, r.len), (0, 20));
}

#[test]
fn what_a_peer_may_not_write_is_refused_and_changes_nothing() {
    let fresh = || {
        let mut rx = RecvRing::new(100, 4);
        rx.arrive(imm(30, false, true)).unwrap();
        rx.arrive(imm(30, false, true)).unwrap();
        rx
    };
    let bad = [
        (imm(51, false, true), "longer than half the ring"),
        (IMM_LEN | IMM_LAST, "the longest length the bits hold"),
        (imm(45, false, true), "crosses the end without the skip flag"),
        (imm(10, true, true), "skips though it fits"),
        (imm(50, true, true), "skips onto bytes still in use"),
    ];
    for (i, why) in bad {
        let mut rx = fresh();
        assert!(rx.arrive(i).is_err(), "accepted a record that {why}");
        assert_eq!((rx.held(), rx.tail), (2, 0), "a refused record ({why}) changed the ring");
        assert_eq!(rx.arrive(imm(40, false, true)).unwrap().off, 60, "{why}");
    }
    let mut rx = fresh();
    rx.arrive(imm(0, false, false)).unwrap();
    rx.arrive(imm(0, false, false)).unwrap();
    assert!(rx.arrive(imm(0, false, true)).is_err(), "more records than credits");
}

#[test]
fn freeing_is_in_order_and_counts_records_once() {
    let mut rx = RecvRing::new(100, 8);
    let a = rx.arrive(imm(10, false, true)).unwrap();
    let b = rx.arrive(imm(20, false, true)).unwrap();
    assert_eq!(rx.release(b.seq), 0, "b waits for a");
    assert_eq!(rx.tail, 0);
    assert_eq!(rx.release(b.seq), 0, "twice is once");
    assert_eq!(rx.release(a.seq), 2);
    assert_eq!((rx.tail, rx.freed), (30, 2));
    assert_eq!(rx.release(a.seq), 0, "a freed record is not freed again");
    assert_eq!(rx.release(u64::MAX), 0, "an unknown number frees nothing");
}

/// Frames packed as `send_ring` packs them: each after its head, end to end while they fit
/// a lap, into a byte ring the receiver reads; every frame comes out whole and in order.
#[test]
fn packed_frames_come_out_whole_and_in_order() {
    let cap = 4096;
    let mut tx = SendRing::new(cap);
    let mut rx = RecvRing::new(cap, 64);
    let mut ring = vec![0u8; cap];
    let (mut sent, mut received, mut got) = (0u32, 0usize, Vec::new());
    let mut x = 99u64;
    for _ in 0..3_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // A write of one to five frames of 0 to 300 bytes, each numbered in its first bytes.
        let (mut pack_start, mut pack_len, mut wrapped_first, mut frames) = (None, 0usize, false, 0);
        for j in 0..(x % 5 + 1) {
            let len = ((x >> (8 * j)) % 301) as usize;
            let rec = PACK_HEAD + len;
            let Some((start, wrapped)) = tx.fits(rec, rx.tail) else { break };
            // The sender's rule: one write stays in one lap (`SendRing::joins`).
            let joins = pack_start.is_none_or(|s| tx.joins(s, pack_len, start, rec, wrapped, cap));
            if !joins || rx.held() + frames + 1 > 64 {
                break;
            }
            tx.advance(start, rec);
            let off = tx.off(start);
            ring[off..off + PACK_HEAD].copy_from_slice(&head(len));
            for (i, b) in ring[off + PACK_HEAD..off + rec].iter_mut().enumerate() {
                *b = (sent as usize * 7 + i) as u8;
            }
            if pack_start.is_none() {
                pack_start = Some(start);
                wrapped_first = wrapped;
            }
            pack_len += rec;
            frames += 1;
            sent += 1;
        }
        if frames > 0 {
            let imm = packed_imm(pack_len as u32, wrapped_first);
            let mut recs = Vec::new();
            rx.arrive_packed(imm, &ring, |r| recs.push(r)).expect("an honest packed write");
            assert_eq!(recs.len(), frames);
            for r in recs {
                let want: Vec<u8> = (0..r.len).map(|i| (received * 7 + i) as u8).collect();
                assert_eq!(&ring[r.off..r.off + r.len], &want[..], "frame {received}");
                received += 1;
                got.push(r);
            }
        }
        // The sink frees the oldest frames, now and then one out of order.
        let free = (x >> 40) % 4;
        for _ in 0..free {
            if got.is_empty() {
                break;
            }
            let r = got.remove(if x % 3 == 0 && got.len() > 1 { 1 } else { 0 });
            rx.release(r.seq);
        }
        if rx.held() >= 60 {
            for r in got.drain(..) {
                rx.release(r.seq);
            }
        }
    }
    for r in got.drain(..) {
        rx.release(r.seq);
    }
    assert!(sent > 3_000, "only {sent} frames went");
    assert_eq!(received, sent as usize);
    assert_eq!((rx.held(), rx.tail), (0, tx.head));
}

#[test]
fn a_broken_packed_write_is_refused_and_changes_nothing() {
    let mut ring = vec![0u8; 100];
    // Two honest frames of 6 and 10 bytes, heads at 0 and 10: a write of 24 bytes.
    ring[0..4].copy_from_slice(&6u32.to_le_bytes());
    ring[10..14].copy_from_slice(&10u32.to_le_bytes());
    let fresh = || RecvRing::new(100, 3);
    let packed = |len: u32| packed_imm(len, false);
    let bad = [
        (packed(22), "a head claiming more than the write holds"),
        (packed(12), "a write ending inside a head"),
        (packed(0), "an empty write"),
        (packed(24) | IMM_LAST, "the last-chunk flag on a packed write"),
        (imm(24, false, true), "no packed flag"),
        (packed(51), "longer than half the ring"),
    ];
    for (i, why) in bad {
        let mut rx = fresh();
        let mut called = false;
        assert!(rx.arrive_packed(i, &ring, |_| called = true).is_err(), "accepted a packed write with {why}");
        assert!(!called, "{why}: a frame was handed out");
        assert_eq!((rx.held(), rx.tail), (0, 0), "{why} changed the ring");
    }
    let mut rx = fresh();
    assert!(rx.arrive(packed(24)).is_err(), "a packed write taken as one record");
    let mut recs = Vec::new();
    rx.arrive_packed(packed(24), &ring, |r| recs.push((r.off, r.len))).unwrap();
    assert_eq!(recs, [(4, 6), (14, 10)]);
    // Credits: three records at most; a second write of two would make four.
    assert!(rx.arrive_packed(packed(24), &ring[..], |_| ()).is_err(), "more records than credits");
    assert!(rx.arrive_packed(packed(24), &ring[..50], |_| ()).is_err(), "a ring read at the wrong size");
    assert_eq!(rx.held(), 2);
}

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

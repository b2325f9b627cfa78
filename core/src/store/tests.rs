use super::*;
use crate::layout::Layout;
use alloc::vec;

fn cfg(nodes: u16) -> Config {
    Config::new(nodes, 1, Layout::uniform(1000, 4).unwrap())
}

fn home_key(nodes: u16, me: NodeId, not: bool) -> Key {
    (0..).map(Key).find(|k| (home_of(*k, nodes) == me) != not).unwrap()
}

#[test]
fn home_materializes_on_first_touch() {
    let s = Store::new(&cfg(3), NodeId(0));
    let k = home_key(3, NodeId(0), false);
    let mut out = [1.0; 4];
    assert!(s.read(k, &mut out));
    assert_eq!(out, [0.0; 4]);
    assert!(s.add(k, &[1.0, 2.0, 3.0, 4.0]));
    assert!(s.read(k, &mut out));
    assert_eq!(out, [1.0, 2.0, 3.0, 4.0]);
    assert!(s.holds(k));
    assert_eq!(s.keys_held(), 0, "home keys take no room from the bound");
}

#[test]
fn foreign_keys_miss_and_wrong_lengths_change_nothing() {
    let s = Store::new(&cfg(3), NodeId(0));
    let k = home_key(3, NodeId(0), true);
    let mut out = [0.0; 4];
    assert!(!s.read(k, &mut out));
    assert!(!s.add(k, &[1.0; 4]));
    assert_eq!(s.keys_held(), 0);
    let h = home_key(3, NodeId(0), false);
    assert!(!s.add(h, &[1.0; 3]));
    assert!(s.read(h, &mut out));
    assert_eq!(out, [0.0; 4]);
}

#[test]
fn take_and_install_move_a_key() {
    let c = cfg(2);
    let a = Store::new(&c, NodeId(0));
    let b = Store::new(&c, NodeId(1));
    let k = home_key(2, NodeId(0), false);
    assert!(a.add(k, &[1.0; 4]));
    let mut buf = vec![];
    let (e, v) = a.take(k, NodeId(1), &mut buf).unwrap();
    assert_eq!((e, v), (Epoch(1), Version(1)));
    assert_eq!(a.whereabouts(k), Whereabouts::Away(NodeId(1), Epoch(1)));
    assert!(!a.read(k, &mut [0.0; 4]));
    b.install(k, e, v, &buf, false).unwrap();
    assert_eq!(b.install(k, e, v, &buf, false), Err(InstallError::AlreadyOwned));
    let mut out = [0.0; 4];
    assert!(b.read(k, &mut out));
    assert_eq!(out, [1.0; 4]);
    // Back home: the away slot becomes owned again, and a stale record is ignored.
    let mut buf2 = vec![];
    let (e2, _) = b.take(k, NodeId(0), &mut buf2).unwrap();
    assert_eq!(e2, Epoch(2));
    assert!(!a.record_owner(k, NodeId(1), Epoch(1)));
    a.install(k, e2, Version(1), &buf2, false).unwrap();
    assert_eq!(a.whereabouts(k), Whereabouts::Here(Epoch(2)));
    // Keys homed at a node do not count against its bound; foreign ones do while held.
    assert_eq!(a.keys_held(), 0);
    assert_eq!(b.keys_held(), 0);
    let k2 = home_key(2, NodeId(0), false);
    let mut buf3 = vec![];
    let (e3, v3) = a.take(k2, NodeId(1), &mut buf3).unwrap();
    b.install(k2, e3, v3, &buf3, false).unwrap();
    assert_eq!(b.keys_held(), 1);
}

#[test]
fn bound_on_keys_held() {
    let mut c = cfg(2);
    c.store_keys_max = 2;
    let a = Store::new(&c, NodeId(0));
    let b = Store::new(&c, NodeId(1));
    // Home keys always materialize.
    for k in (0..50).map(Key).filter(|k| home_of(*k, 2) == NodeId(1)) {
        assert!(b.read(k, &mut [0.0; 4]));
    }
    assert_eq!(b.keys_held(), 0);
    // Foreign keys take room: two fit, the third is refused and changes nothing.
    let foreign: Vec<Key> = (0..50).map(Key).filter(|k| home_of(*k, 2) == NodeId(0)).take(3).collect();
    for (i, k) in foreign.iter().enumerate() {
        let mut buf = vec![];
        let (e, v) = a.take(*k, NodeId(1), &mut buf).unwrap();
        let r = b.install(*k, e, v, &buf, false);
        assert_eq!(r.is_ok(), i < 2, "{r:?}");
    }
    assert_eq!(b.keys_held(), 2);
    // A reservation takes room too, and gives it back.
    assert!(!b.reserve_slots(1));
    b.unreserve_slots(1);
    assert!(b.reserve_slots(1));
}

#[test]
fn uniform_init_is_deterministic_and_bounded() {
    let init = Init::Uniform { scale: 0.5 };
    for k in 0..100 {
        for i in 0..8 {
            let a = Store::initial_value(init, 3, Key(k), i);
            assert_eq!(a, Store::initial_value(init, 3, Key(k), i));
            assert!((-0.5..0.5).contains(&a), "{a}");
        }
    }
}

#[test]
fn add_kernels_match_a_plain_loop_at_every_width() {
    // Widths with a fixed kernel (8..=128, powers of two), their neighbours, and odd ones.
    for len in 0..=260usize {
        let src: Vec<f32> = (0..len).map(|i| (i % 7) as f32 - 3.0).collect();
        let mut dst: Vec<f32> = (0..len).map(|i| (i * 3) as f32).collect();
        let want: Vec<f32> = dst.iter().zip(&src).map(|(a, b)| a + b).collect();
        add_into(&mut dst, &src);
        assert_eq!(dst, want, "width {len}");
    }
}

use parma_core::sampling::SampleError;
use parma_core::{DistId, Distribution, Key, NodeId, OpError, SampleHandle};

use super::*;
use crate::suite::{default_dir, trace_files};
use crate::trace::{parse, setup_from};

fn through_json<T: Serialize + for<'de> Deserialize<'de>>(x: &T) -> T {
    let line = serde_json::to_string(x).unwrap();
    assert!(!line.contains('\n'));
    serde_json::from_str(&line).unwrap()
}

#[test]
fn every_trace_setup_crosses_unchanged() {
    let files = trace_files(&default_dir()).unwrap();
    assert!(!files.is_empty());
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        // Every cluster of the trace: its first command and any later `cluster`.
        let clusters = parse(&text).unwrap().into_iter().filter(|b| b.command.starts_with("cluster"));
        for block in clusters {
            let setup = setup_from(&block.command).unwrap();
            let wire = WireSetup::from_setup(&setup).unwrap();
            let back = through_json(&wire).to_setup().unwrap();
            assert_eq!(WireSetup::from_setup(&back).unwrap(), wire, "{path:?}");
            let (a, b) = (setup.config(), back.config());
            assert_eq!(a.wire_cluster(), b.wire_cluster(), "{path:?}");
            assert_eq!(
                (a.workers_per_node, a.sampling, a.relocation_hold, a.gate),
                (b.workers_per_node, b.sampling, b.relocation_hold, b.gate)
            );
            assert_eq!(a.hot_keys, b.hot_keys, "{path:?}");
        }
    }
}

#[test]
fn a_setup_with_an_unknown_name_does_not_cross() {
    let setup = setup_from("cluster nodes=2 workers=1 keys=4 len=1").unwrap();
    let mut wire = WireSetup::from_setup(&setup).unwrap();
    wire.technique = "teleportation".into();
    assert!(wire.to_setup().unwrap_err().contains("teleportation"));
    let mut wire = WireSetup::from_setup(&setup).unwrap();
    wire.gate = "ssp:soon".into();
    assert!(wire.to_setup().unwrap_err().contains("unknown gate `ssp:soon`"));
}

#[test]
fn errors_cross_unchanged() {
    let errors = [
        OpError::KeyOutsideLayout { key: Key(9) },
        OpError::ValueLength { expected: 4, got: 3 },
        OpError::DuplicateKey { key: Key(2) },
        OpError::Busy,
        OpError::StoreFull,
        OpError::Timeout,
        OpError::PeerFailed { node: NodeId(2) },
        OpError::RoutingLoop,
        OpError::Unreachable { node: NodeId(2) },
        OpError::FrameRefused { node: NodeId(1) },
        OpError::Closed,
        OpError::InvalidArgument,
        OpError::Sampling(SampleError::BadDistribution),
        OpError::Sampling(SampleError::TooManyDistributions),
        OpError::Sampling(SampleError::UnknownDistribution { dist: DistId(3) }),
        OpError::Sampling(SampleError::DistributionMismatch { dist: DistId(1), node: NodeId(2) }),
        OpError::Sampling(SampleError::UnknownHandle { handle: SampleHandle(7) }),
        OpError::Sampling(SampleError::TooManyHandles),
        OpError::Sampling(SampleError::BadSize { n: 0 }),
        OpError::Sampling(SampleError::CountBeyondSample { count: 5, left: 2 }),
        OpError::Sampling(SampleError::BufferLength { expected: 8, got: 4 }),
        OpError::Sampling(SampleError::NoLocalKey),
    ];
    for e in errors {
        assert_eq!(through_json(&WireError::from(e)).to_op(), Ok(e));
    }
    let r: Response = Err(WireError::Agent("no node".into()));
    assert_eq!(through_json(&r).unwrap_err().to_op(), Err("no node".to_string()));
}

#[test]
fn values_cross_bit_for_bit() {
    let v = [0.1f32, -0.0, 1e-38, f32::MAX, 3.0, f32::NAN];
    let back = from_bits(&through_json(&to_bits(&v)));
    assert!(v.iter().zip(&back).all(|(a, b)| a.to_bits() == b.to_bits()));
}

#[test]
fn distributions_cross() {
    let u = Distribution::uniform(Key(2), Key(7)).unwrap();
    let back = through_json(&WireDist::from_dist(&u).unwrap()).to_dist().unwrap();
    assert_eq!(back.fingerprint(), u.fingerprint());

    let keys: Vec<Key> = (1..9).map(Key).collect();
    let w = Distribution::weighted(&keys, &[8.0, 4.0, 2.0, 1.0, 1.0, 1.0, 1.0, 0.0]).unwrap();
    let back = through_json(&WireDist::from_dist(&w).unwrap()).to_dist().unwrap();
    assert_eq!(back.support_len(), 7);
    for i in 0..w.support_len() {
        let k = w.key_at(i);
        assert_eq!(back.key_at(i), k);
        assert!((back.probability(k) - w.probability(k)).abs() < 1e-15);
    }
    let bad = WireDist::Weighted { keys: vec![1, 1], prob_bits: vec![0.5f64.to_bits(); 2] };
    assert_eq!(bad.to_dist().unwrap_err(), OpError::Sampling(SampleError::BadDistribution));
}

#[test]
fn lines_are_bounded() {
    let mut input = std::io::Cursor::new(b"one\ntwo".to_vec());
    assert_eq!(read_line(&mut input).unwrap().as_deref(), Some("one"));
    assert!(read_line(&mut input).unwrap_err().contains("ended inside a line"));
    assert_eq!(read_line(&mut std::io::Cursor::new(Vec::new())).unwrap(), None);

    let mut long = vec![b'x'; LINE_LEN_MAX + 10];
    long.push(b'\n');
    assert!(read_line(&mut std::io::Cursor::new(long)).unwrap_err().contains("longer than"));
    let mut exact = vec![b'x'; LINE_LEN_MAX];
    exact.push(b'\n');
    assert_eq!(read_line(&mut std::io::Cursor::new(exact)).unwrap().map(|l| l.len()), Some(LINE_LEN_MAX));
    assert!(read_line(&mut std::io::Cursor::new(vec![0xff, b'\n'])).unwrap_err().contains("UTF-8"));
}

#[test]
fn a_garbled_response_is_an_error_not_a_panic() {
    for line in [
        "",
        "{",
        "{\"Ok\":{\"Pulled\":{\"val_bits\":[-1],\"local\":[]}}}",
        "[1,2]",
        "{\"Ok\":\"Teleported\"}",
    ] {
        assert!(serde_json::from_str::<Response>(line).is_err(), "{line}");
    }
}

#[test]
fn wire_errors_print_what_they_carry() {
    let e = WireError::from(OpError::KeyOutsideLayout { key: Key(77) });
    assert_eq!(e.to_string(), OpError::KeyOutsideLayout { key: Key(77) }.to_string());
    assert!(e.to_string().contains("key 77"), "{e}");
    let s = WireSampleError::from(SampleError::BadSize { n: 0 });
    assert!(s.to_string().contains("sample size 0"), "{s}");
    assert!(WireError::Sampling(s).to_string().contains("sample size 0"));
    let agent = WireError::Agent("node 3 did not start: port 9 in use".into());
    assert_eq!(agent.to_string(), "node 3 did not start: port 9 in use");
    let newer = WireError::Unnamed("a future error".into());
    assert!(newer.to_string().contains("cannot name: a future error"), "{newer}");
}

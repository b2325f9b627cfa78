use super::*;

fn opts(bind: &str, advertise: Option<&str>) -> ZmqOptions {
    ZmqOptions { bind: bind.into(), advertise: advertise.map(Into::into), ..ZmqOptions::loopback() }
}

#[test]
fn the_advertised_endpoint_follows_the_bound_port_unless_told() {
    let bound: std::net::SocketAddr = "127.0.0.1:4100".parse().unwrap();
    assert_eq!(advertised(&opts("tcp://127.0.0.1:0", None), bound).unwrap(), "tcp://127.0.0.1:4100");
    let any: std::net::SocketAddr = "0.0.0.0:4100".parse().unwrap();
    let err = advertised(&opts("tcp://0.0.0.0:0", None), any).unwrap_err().to_string();
    assert!(err.contains("advertise"), "{err}");
    let cases = [
        ("10.1.2.3", "tcp://10.1.2.3:4100"),
        ("node7.cluster", "tcp://node7.cluster:4100"),
        ("node7.cluster:9000", "tcp://node7.cluster:9000"),
        ("tcp://10.1.2.3:9000", "tcp://10.1.2.3:9000"),
        ("::1", "tcp://[::1]:4100"),
        ("[::1]:9000", "tcp://[::1]:9000"),
    ];
    for (adv, want) in cases {
        assert_eq!(advertised(&opts("tcp://0.0.0.0:0", Some(adv)), any).unwrap(), want, "{adv}");
    }
    assert!(advertised(&opts("tcp://0.0.0.0:0", Some("host:notaport")), any).is_err());
}

#[test]
fn endpoints_must_be_tcp_with_a_host_and_a_port() {
    for ok in ["tcp://127.0.0.1:1", "tcp://[::1]:65535", "tcp://a.b:80"] {
        assert!(io::check_endpoint(ok).is_ok(), "{ok}");
    }
    for bad in ["127.0.0.1:80", "tcp://:80", "tcp://host", "tcp://host:0", "tcp://host:70000", "ipc://x"] {
        assert!(io::check_endpoint(bad).is_err(), "{bad}");
    }
}

#[test]
fn bad_options_and_peer_tables_are_refused_with_a_reason() {
    let e = Bound::bind(opts("udp://127.0.0.1:0", None)).err().unwrap().to_string();
    assert!(e.contains("tcp://"), "{e}");
    let mut o = ZmqOptions::loopback();
    o.session.peer_timeout = o.session.heartbeat_interval;
    let e = Bound::bind(o).err().unwrap().to_string();
    assert!(e.contains("heartbeat_interval"), "{e}");

    struct T;
    impl Token for T {
        fn prove(&self, _: u64, _: NodeId, _: NodeId, _: u64) -> [u8; 32] {
            [7; 32]
        }
    }
    let b = Bound::bind(ZmqOptions::loopback()).unwrap();
    let e =
        b.start(NodeId(2), vec!["tcp://127.0.0.1:1".into(); 2], 1, Arc::new(T)).err().unwrap().to_string();
    assert!(e.contains("node 2"), "{e}");
    let b = Bound::bind(ZmqOptions::loopback()).unwrap();
    let e = b
        .start(NodeId(0), vec!["tcp://127.0.0.1:1".into(), "nonsense".into()], 1, Arc::new(T))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("node 1"), "{e}");
}

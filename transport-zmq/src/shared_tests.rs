//! The shared state driven by hand, without sockets: a core `Session` plays the peer, and
//! packets are handed across directly.

use super::*;
use crate::shapes::packets;
use parma_core::session::{head_len, hello_of, SessionOptions};

struct Fixed;

impl Token for Fixed {
    fn prove(&self, nonce: u64, prover: NodeId, verifier: NodeId, digest: u64) -> [u8; PROOF_LEN] {
        let mut out = [0u8; PROOF_LEN];
        let x = nonce ^ digest.rotate_left(17) ^ (u64::from(prover.0) << 32) ^ u64::from(verifier.0);
        out[..8].copy_from_slice(&x.to_le_bytes());
        out
    }
}

const DIGEST: u64 = 0x5eed;

/// Node 1's state and node 0's session toward it, with the handshake done.
fn connected() -> (State, Session<SharedToken>) {
    let token: Arc<dyn Token + Send + Sync> = Arc::new(Fixed);
    let opts = ZmqOptions::loopback();
    let mut st =
        State::new(Identity { me: NodeId(1), digest: DIGEST, incarnation: 11 }, 2, &opts, token.clone())
            .unwrap();
    let id0 = Identity { me: NodeId(0), digest: DIGEST, incarnation: 10 };
    let mut a =
        Session::new(SessionOptions::default(), id0, NodeId(1), SharedToken(token), st.now()).unwrap();
    // Node 0 has the lower id: it connects (at once), and its first packet is a Hello.
    a.handle_timeout(st.now());
    assert_eq!(a.poll_event(), Some(SessionEvent::Connect));
    a.link_up(st.now(), 0x1234);
    let hello = a.poll_transmit_parts().expect("a Hello");
    let greeting = hello_of(hello.head()).unwrap();
    let now = st.now();
    let b = st.session(NodeId(0)).unwrap();
    let welcome = b.accept(now, &greeting, 0x5678).unwrap();
    a.handle_parts(now, welcome.head(), &[]).unwrap();
    let proof = a.poll_transmit_parts().expect("a Proof");
    b.handle_candidate(now, proof.head(), &[]).unwrap();
    for _ in 0..20 {
        exchange(&mut st, &mut a);
        if a.is_up() && st.is_up(NodeId(0)) {
            return (st, a);
        }
    }
    panic!("the handshake did not complete");
}

/// Every packet waiting on either side, handed to the other; the frames node 0 received.
fn exchange(st: &mut State, a: &mut Session<SharedToken>) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let now = st.now();
    while let Some(p) = a.poll_transmit_parts() {
        let body = p.body().map(|f| Bytes::copy_from_slice(f.as_slice())).unwrap_or_default();
        st.session_packet(NodeId(0), p.head(), body);
    }
    let b = st.session(NodeId(0)).unwrap();
    while let Some(p) = b.poll_transmit_parts() {
        let body = p.body().map(|f| f.as_slice().to_vec()).unwrap_or_default();
        if a.handle_parts(now, p.head(), &body).unwrap() {
            a.frames_taken(1);
            got.push(body);
        }
    }
    got
}

fn send(st: &mut State, to: u16) -> Result<(), SendError> {
    st.send(NodeId(to), 3, &mut |b| b.copy_from_slice(b"abc"))
}

#[test]
fn a_peer_that_said_goodbye_is_a_failed_peer_to_the_driver_not_a_closed_transport() {
    let (mut st, mut a) = connected();
    assert_eq!(send(&mut st, 0), Ok(()));
    assert_eq!(exchange(&mut st, &mut a), vec![b"abc".to_vec()]);
    // Node 0 closes: its Bye reaches node 1's session before the I/O thread's next pump has
    // turned it into an event. A send in that window must not tell the driver that its own
    // transport closed: the driver would stop the node undrained.
    a.close(st.now());
    exchange(&mut st, &mut a);
    assert!(st.session(NodeId(0)).unwrap().is_closed());
    assert_eq!(send(&mut st, 0), Err(SendError::PeerFailed));
    assert_eq!(st.next_event(), None, "not reported before the pump");
    let mut actions = Vec::new();
    st.pump(&mut actions);
    assert_eq!(st.next_event(), Some(TransportEvent::PeerFailed(NodeId(0))));
    assert_eq!(send(&mut st, 0), Err(SendError::PeerFailed));
    // This node itself is still open: sends to itself go on.
    assert_eq!(send(&mut st, 1), Ok(()));
    st.close();
    assert_eq!(send(&mut st, 1), Err(SendError::Closed));
}

/// The shapes of a message off a socket: one packet in one part or two, a batch behind an
/// empty part, and the shapes a stranger may send, which are refused whole.
#[test]
fn a_message_is_one_packet_or_a_batch_and_nothing_else() {
    let (mut st, mut a) = connected();
    let mut data = |text: &[u8]| {
        a.send_with(text.len(), &mut |b| b.copy_from_slice(text)).unwrap();
        Bytes::from(a.poll_transmit_parts().expect("a data packet").to_vec())
    };
    let (one, two, three) = (data(b"one"), data(b"two"), data(b"three"));
    let bodies = |parts: Vec<Bytes>| -> Option<Vec<Vec<u8>>> {
        Some(packets(parts.into_iter().collect())?.map(|(_, b)| b.to_vec()).collect())
    };
    assert_eq!(bodies(vec![one.clone()]), Some(vec![b"one".to_vec()]));
    let (head, body) = (one.slice(..head_len(&one)), one.slice(head_len(&one)..));
    assert_eq!(bodies(vec![head, body]), Some(vec![b"one".to_vec()]));
    let batch = vec![Bytes::new(), one.clone(), two.clone(), three.clone()];
    assert_eq!(bodies(batch), Some(vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]));
    // Refused: a batch of one, an empty packet in a batch, three parts without the marker,
    // nothing at all.
    assert!(packets([Bytes::new(), one.clone()].into_iter().collect()).is_none());
    assert!(packets([Bytes::new(), one.clone(), Bytes::new()].into_iter().collect()).is_none());
    assert!(packets([one.clone(), two.clone(), three.clone()].into_iter().collect()).is_none());
    assert!(packets(VecDeque::new()).is_none());
    // A batch handed to the session in order delivers its frames in order.
    for (head, body) in packets([Bytes::new(), one, two, three].into_iter().collect()).unwrap() {
        st.session_packet(NodeId(0), &head, body);
    }
    let mut frames = Vec::new();
    st.take(16, &mut frames).unwrap();
    let got: Vec<&[u8]> = frames.iter().map(|(_, f)| &f[..]).collect();
    assert_eq!(got, [&b"one"[..], b"two", b"three"]);
}

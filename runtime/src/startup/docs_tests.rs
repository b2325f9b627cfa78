//! The rendezvous examples of `docs/session.md` are what this module's encoders produce, so
//! that the doc cannot drift from the code (`transport-zmq/tests/from_the_docs.rs` checks
//! the session's examples, and a live rendezvous against the doc's registration).

use std::collections::HashMap;

use parma_core::{cluster_digest, Config, Layout, NodeId, Placement, Technique};

use super::join::transcript;
use super::wire::{Hello, Msg};
use super::{ClusterToken, StartupError};

/// Each `<!-- example: NAME -->` of the doc and the bytes of the text block below it.
fn examples() -> HashMap<String, Vec<u8>> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/session.md")).unwrap();
    let mut out = HashMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line.strip_prefix("<!-- example: ").and_then(|r| r.strip_suffix(" -->")) else {
            continue;
        };
        assert_eq!(lines.next(), Some("```text"), "{name}");
        let mut bytes = Vec::new();
        for l in lines.by_ref().take_while(|l| *l != "```") {
            let hex = l.split('|').nth(1).unwrap_or_else(|| panic!("{name}: {l:?}"));
            bytes.extend(hex.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()));
        }
        out.insert(name.to_string(), bytes);
    }
    out
}

#[test]
fn the_docs_rendezvous_examples_are_what_the_encoders_produce() {
    let ex = examples();
    let mut cfg = Config::new(2, 1, Layout::uniform(1000, 4).unwrap());
    cfg.technique = Technique::StaticPartitioning;
    cfg.placement = Placement::Hashed;
    let digest = cluster_digest(&cfg, 0, None);
    let token = ClusterToken::from_secret(*b"an example cluster token").unwrap();
    let hello = Hello {
        nonce: 0x0102_0304_0506_0708,
        rank: Some(NodeId(0)),
        world: 1,
        digest,
        endpoint: "tcp://127.0.0.1:40000".into(),
    };
    assert_eq!(ex["rendezvous-hello"], Msg::Hello(hello.clone()).encode(), "rendezvous-hello");
    let nonce = 0xa0a1_a2a3_a4a5_a6a7;
    let t = transcript(&hello, nonce);
    let challenge = Msg::Challenge { nonce, proof: token.prove_rendezvous(b'S', &t) };
    assert_eq!(ex["rendezvous-challenge"], challenge.encode(), "rendezvous-challenge");
    let proof = Msg::Proof { proof: token.prove_rendezvous(b'C', &t) };
    assert_eq!(ex["rendezvous-proof"], proof.encode(), "rendezvous-proof");
    assert_eq!(ex["rendezvous-registered"], Msg::Registered.encode(), "rendezvous-registered");
    let table = Msg::Table { rank: NodeId(0), digest, endpoints: vec![hello.endpoint.clone()] };
    assert_eq!(ex["rendezvous-table"], table.encode(), "rendezvous-table");
    let other =
        cluster_digest(&cfg, parma_core::fnv1a(b"an example job"), Some(std::time::Duration::from_secs(5)));
    let refused =
        Msg::Refused(StartupError::DigestMismatch { rank: Some(NodeId(0)), node: other, rendezvous: digest });
    assert_eq!(ex["rendezvous-refused"], refused.encode(), "rendezvous-refused");
    // Every example decodes, and no other bytes follow its frame.
    for name in ["hello", "challenge", "proof", "registered", "table", "refused"] {
        let f = &ex[&format!("rendezvous-{name}")];
        assert_eq!(u32::from_le_bytes(f[..4].try_into().unwrap()) as usize, f.len() - 4, "{name}");
        assert!(Msg::decode(&f[4..]).is_ok(), "{name}");
    }
}

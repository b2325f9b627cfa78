//! Every error type of the core prints a message that names the offending value and what
//! would be valid, not its Debug form.

use alloc::string::{String, ToString};

use super::*;
use crate::config::Config;
use crate::ids::{DistId, SampleHandle};
use crate::layout::Layout;
use crate::sampling::SampleError;
use crate::session::PacketError;
use crate::store::InstallError;
use crate::transport::{RecvError, SendError};

/// `e`'s message, checked to hold each of `parts` and not to be its Debug form.
fn says<E: fmt::Display + fmt::Debug + core::error::Error>(e: E, parts: &[&str]) -> String {
    let text = e.to_string();
    for p in parts {
        assert!(text.contains(p), "{text:?} does not contain {p:?}");
    }
    assert_ne!(text, alloc::format!("{e:?}"), "{e:?} prints its Debug form");
    text
}

#[test]
fn config_errors_name_the_value_and_the_valid_range() {
    says(ConfigError::ValueLen { len: 0 }, &["value length 0", "from 1 to 16777216"]);
    says(ConfigError::NodeCount { nodes: 5000 }, &["5000 nodes", "from 1 to 4096"]);
    says(ConfigError::NodeOutOfRange { node: NodeId(7) }, &["node id 7", "below"]);
    says(ConfigError::NoWorkers, &["workers_per_node", "at least one"]);
    says(ConfigError::EmptyKeySpace, &["no keys"]);
    // A configuration that fails validation names its field and the rule.
    let mut cfg = Config::new(2, 1, Layout::uniform(100, 4).unwrap());
    cfg.store_shards = 3;
    let e = cfg.validate(NodeId(0)).unwrap_err();
    says(e, &["store_shards", "power of two"]);
    let mut cfg = Config::new(2, 1, Layout::uniform(100, 4).unwrap());
    cfg.frame_len_max = 10;
    says(cfg.validate(NodeId(0)).unwrap_err(), &["frame_len_max", "at least a header"]);
    says(
        Config::new(2, 1, Layout::uniform(100, 4).unwrap()).validate(NodeId(2)).unwrap_err(),
        &["node id 2"],
    );
}

#[test]
fn wire_errors_name_the_value() {
    says(WireError::Oversized { len: 70000 }, &["70000 bytes", "frame_len_max"]);
    says(WireError::UnsupportedVersion { version: 99 }, &["version 99", "reads version"]);
    says(WireError::ForeignCluster { cluster: 0xabcd }, &["cluster 0x0000abcd", "same configuration"]);
    says(WireError::UnknownKind { kind: 200 }, &["kind 200"]);
    says(WireError::BufferTooSmall, &["encoded_len()"]);
}

#[test]
fn op_errors_name_the_value() {
    says(OpError::KeyOutsideLayout { key: Key(12345) }, &["key 12345", "outside the layout"]);
    says(OpError::ValueLength { expected: 8, got: 5 }, &["5 floats", "need 8"]);
    says(OpError::PeerFailed { node: NodeId(3) }, &["node 3"]);
    says(OpError::Sampling(SampleError::BadSize { n: 0 }), &["sampling:", "sample size 0"]);
}

#[test]
fn sample_errors_name_the_value() {
    says(SampleError::UnknownDistribution { dist: DistId(4) }, &["distribution 4"]);
    says(SampleError::UnknownHandle { handle: SampleHandle(9) }, &["handle 9"]);
    says(SampleError::BadSize { n: 0 }, &["sample size 0", "sample_size_max"]);
    says(SampleError::CountBeyondSample { count: 10, left: 3 }, &["10 samples", "3 left"]);
    says(SampleError::BufferLength { expected: 6, got: 2 }, &["holds 2", "need 6"]);
    says(SampleError::TooManyHandles, &["handles_max"]);
}

#[test]
fn transport_errors_say_what_to_do() {
    says(SendError::WouldBlock, &["full", "waker"]);
    says(SendError::TooLarge, &["frame_len_max"]);
    says(SendError::UnknownPeer, &["not one this transport knows"]);
    says(RecvError::Closed, &["closed"]);
}

#[test]
fn install_and_packet_errors_name_the_bound() {
    says(InstallError::Full, &["store_keys_max"]);
    says(InstallError::AlreadyOwned, &["main copy"]);
    says(PacketError::Version { version: 42 }, &["version 42"]);
    says(PacketError::TooLong { len: 99999 }, &["99999 bytes"]);
    says(crate::node::InvariantViolation("more waiting operations than the bound", 9), &["bound", "(9)"]);
}

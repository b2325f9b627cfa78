//! `parma sim --determinism`: each seed runs here and again in a second `parma` process.
#![forbid(unsafe_code)]

use std::process::Command;

#[test]
fn seeds_replay_in_another_process() {
    // Seeds 28 to 30 under relocation: in seed 28 a node stops for good, and its peers fail
    // dozens of requests at once.
    let out = Command::new(env!("CARGO_BIN_EXE_parma"))
        .args(["sim", "--technique", "relocation", "--first", "28", "--seeds", "3", "--threads", "1"])
        .arg("--determinism")
        .output()
        .expect("run parma");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    // Passed 3, failed 0, not deterministic 0; and a node stopped in one seed.
    assert!(text.contains("| relocation | 3 | 0 | 0 |"), "{text}");
    assert!(text.contains("| 1 ("), "no seed stopped a node:\n{text}");
    assert!(!text.contains("fingerprint "), "fingerprints are for the second process:\n{text}");

    let out = Command::new(env!("CARGO_BIN_EXE_parma"))
        .args(["sim", "--technique", "relocation", "--first", "28", "--seeds", "2", "--threads", "1"])
        .arg("--fingerprints")
        .output()
        .expect("run parma");
    let text = String::from_utf8_lossy(&out.stdout);
    let prints: Vec<&str> = text.lines().filter(|l| l.starts_with("fingerprint relocation ")).collect();
    assert_eq!(prints.len(), 2, "{text}");
    assert!(prints[0].starts_with("fingerprint relocation 28 passed trace "), "{text}");
}

//! Flags of `parma train` refused at the edge, with a message that names the flag, before
//! any data is read or any node starts.
#![forbid(unsafe_code)]

mod common;

use common::{parma, text};

/// Runs `parma args` and returns its output, requiring it to fail.
fn refused(args: &[&str]) -> String {
    let out = parma(args);
    let all = text(&out);
    assert!(!out.status.success(), "{args:?} was accepted: {all}");
    assert!(!all.contains("panicked"), "{args:?}: {all}");
    all
}

#[test]
fn split_seeds_are_checked_and_refused_where_the_data_has_its_own_split() {
    for bad in ["-1", "x", "0xg", "18446744073709551616"] {
        let all = refused(&["train", "mf", &format!("--split-seed={bad}")]);
        assert!(all.contains("--split-seed") && all.contains("expected a whole number"), "{bad}: {all}");
    }
    // Adult comes with its official split: refused before it is looked for in the cache.
    let all = refused(&["train", "lr", "--data", "adult", "--split-seed", "3"]);
    assert!(all.contains("--split-seed") && all.contains("its own train/test split"), "{all}");
}

#[test]
fn reg_on_names_its_choices() {
    let all = refused(&["train", "kge", "--reg-on", "negatives"]);
    assert!(all.contains("positives, all"), "{all}");
}

//! The examples run, in one process and as one node per process, and the guide's loop builds
//! and trains in a crate outside the workspace that depends on `parma` by path.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The directory cargo put this profile's examples in (`target/<profile>/examples`).
fn examples_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    exe.parent().and_then(Path::parent).expect("target/<profile>").join("examples")
}

/// Waits for `child` at most `limit`, killing it past that.
fn wait_bounded(mut child: Child, limit: Duration) -> Output {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("output");
    panic!("still running after {limit:?}; stdout:\n{}", String::from_utf8_lossy(&out.stdout));
}

fn check(out: &Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn the_in_process_example_trains_checkpoints_and_restores() {
    let child = Command::new(examples_dir().join("mf_local"))
        .args(["2", "2", "4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the mf_local example (built by cargo test)");
    let out = check(&wait_bounded(child, Duration::from_secs(300)), "mf_local");
    assert!(out.contains("epoch 4: test RMSE"), "{out}");
    assert!(out.contains("restored from"), "{out}");
}

#[test]
fn the_cluster_example_trains_with_one_node_per_process() {
    let port = parma::startup::free_rendezvous_port([127, 0, 0, 1].into()).expect("a free port on 127.0.0.1");
    let token: String = (0..32).map(|i| format!("{:02x}", (i * 37 + 11) % 256)).collect();
    let children: Vec<Child> = (0..2)
        .map(|rank| {
            Command::new(examples_dir().join("mf_cluster"))
                .args(["1", "3"])
                .env("PARMA_RANK", rank.to_string())
                .env("PARMA_WORLD_SIZE", "2")
                .env("PARMA_RENDEZVOUS", format!("127.0.0.1:{port}"))
                .env("PARMA_TOKEN", &token)
                .env_remove("PARMA_TOKEN_FILE")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("the mf_cluster example (built by cargo test)")
        })
        .collect();
    for (rank, child) in children.into_iter().enumerate() {
        let out = check(&wait_bounded(child, Duration::from_secs(300)), &format!("mf_cluster rank {rank}"));
        assert!(out.contains(&format!("node {rank}: test RMSE")), "{out}");
    }
}

#[test]
fn a_crate_outside_the_workspace_builds_and_runs_the_guides_loop() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the repository").to_path_buf();
    let dir = std::env::temp_dir().join(format!("parma-outside-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src/shared")).unwrap();
    let manifest = format!(
        "[package]\nname = \"my-model\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n\
         parma = {{ path = {:?} }}\nrand = \"0.8\"\n\n[patch.crates-io]\nzeromq = {{ path = {:?} }}\n\n\
         [workspace]\n",
        repo.join("parma"),
        repo.join("vendor/zeromq"),
    );
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    // The workspace's lock file: the same versions, so that the build needs no registry.
    std::fs::copy(repo.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    // The guide's loop is the example's: `docs/guide.md` quotes parma/examples/mf_local.rs.
    let example = repo.join("parma/examples");
    std::fs::copy(example.join("mf_local.rs"), dir.join("src/main.rs")).unwrap();
    std::fs::copy(example.join("shared/mf.rs"), dir.join("src/shared/mf.rs")).unwrap();

    let release = !cfg!(debug_assertions);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(&cargo);
    build.arg("build").arg("--offline").arg("--quiet").current_dir(&dir);
    if release {
        build.arg("--release");
    }
    // A target directory of its own: the running `cargo test` holds the workspace's.
    let target = repo.join("target/outside-crate");
    build.env("CARGO_TARGET_DIR", &target).stdout(Stdio::piped()).stderr(Stdio::piped());
    check(
        &wait_bounded(build.spawn().expect("cargo"), Duration::from_secs(1800)),
        "cargo build of the outside crate",
    );

    let bin = target.join(if release { "release" } else { "debug" }).join("my-model");
    let child = Command::new(bin)
        .args(["2", "1", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the outside crate's binary");
    let out = check(&wait_bounded(child, Duration::from_secs(600)), "the outside crate");
    assert!(out.contains("epoch 3: test RMSE"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

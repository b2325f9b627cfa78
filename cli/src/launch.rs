//! `parma launch`: starts N local node processes of this binary, as `torchrun --standalone`
//! does, and watches them; and `parma launch-probe`, the hidden subcommand its tests start.
//!
//! Each child gets `PARMA_RANK`, `PARMA_WORLD_SIZE`, `PARMA_RENDEZVOUS=127.0.0.1:<port>` and
//! a fresh `PARMA_TOKEN` (never on a command line). Every line a child writes is copied to
//! the launcher's stdout or stderr behind `[rank] `. When a child fails (a non-zero status
//! or a signal), the others get SIGTERM, then SIGKILL after the grace period, and the
//! launcher exits with 1 naming the rank and how it failed. SIGINT, SIGTERM or SIGHUP to the
//! launcher stop the children the same way; it then exits with 128 + the signal's number.
//! On Linux a child also gets SIGTERM should the launcher die of SIGKILL.

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::Args;
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use parma_runtime::startup::{establish, ClusterToken, Launch};

/// How often the launcher looks at its children and at the signals it caught.
const POLL: Duration = Duration::from_millis(20);
/// Longest line copied at once; a longer one is cut into pieces, each behind the prefix.
const LINE_LEN_MAX: usize = 64 << 10;
/// How long the launcher waits for a SIGKILLed child to be reaped, and for the children's
/// output to end once they all exited (a grandchild may still hold a pipe).
const LINGER: Duration = Duration::from_secs(2);

#[derive(Args, Debug)]
pub(crate) struct LaunchArgs {
    /// Node processes to start, ranks 0 to N-1.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=i64::from(parma_core::config::NODES_MAX)))]
    nodes: u16,
    /// Port of the rendezvous on 127.0.0.1 (default: a free port, picked now).
    #[arg(long)]
    rendezvous_port: Option<u16>,
    /// Time the other nodes get between SIGTERM and SIGKILL once one failed, in ms.
    #[arg(long, default_value_t = 5000)]
    grace_ms: u64,
    /// The parma subcommand every node runs, and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "SUBCOMMAND")]
    command: Vec<String>,
}

/// The signal the launcher caught (0: none).
static CAUGHT: AtomicUsize = AtomicUsize::new(0);

/// The environment variable that tells a child which process launched it: its pid.
const LAUNCHER_PID: &str = "PARMA_LAUNCHER_PID";

pub(crate) fn run(args: &LaunchArgs) -> ExitCode {
    match launch(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("parma launch: {e}");
            ExitCode::FAILURE
        }
    }
}

fn launch(args: &LaunchArgs) -> Result<ExitCode, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the parma executable: {e}"))?;
    let port = match args.rendezvous_port {
        Some(p) => p,
        // Free now, outside the ephemeral range; rank 0 binds it a moment later.
        None => parma_runtime::startup::free_rendezvous_port([127, 0, 0, 1].into())
            .map_err(|e| format!("cannot pick a free port: {e}"))?,
    };
    catch_signals()?;
    let token = ClusterToken::generate();
    let n = args.nodes;
    eprintln!("parma launch: {n} nodes, rendezvous 127.0.0.1:{port}");
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let mut children: Vec<Child> = Vec::new();
    for rank in 0..n {
        let mut cmd = Command::new(&exe);
        cmd.args(&args.command)
            .env("PARMA_RANK", rank.to_string())
            .env("PARMA_WORLD_SIZE", n.to_string())
            .env("PARMA_RENDEZVOUS", format!("127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        token.export(&mut cmd);
        // The child asks for its parent-death signal itself ([`die_with_launcher`]).
        #[cfg(target_os = "linux")]
        cmd.env(LAUNCHER_PID, std::process::id().to_string());
        let mut child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                let mut states = vec![None; children.len()];
                stop(&mut children, &mut states, Duration::from_millis(args.grace_ms));
                return Err(format!("cannot start rank {rank}: {e}"));
            }
        };
        if let Some(out) = child.stdout.take() {
            pump(out, rank, false, done_tx.clone());
        }
        if let Some(err) = child.stderr.take() {
            pump(err, rank, true, done_tx.clone());
        }
        children.push(child);
    }
    drop(done_tx);
    let outcome = supervise(&mut children, Duration::from_millis(args.grace_ms));
    // The children are gone; their output ends with them (or soon after).
    let until = Instant::now() + LINGER;
    for _ in 0..2 * usize::from(n) {
        if done_rx.recv_timeout(until.saturating_duration_since(Instant::now())).is_err() {
            break;
        }
    }
    Ok(outcome)
}

/// Waits for the children; stops them all once one fails or a signal came. Returns the
/// launcher's exit code.
fn supervise(children: &mut [Child], grace: Duration) -> ExitCode {
    let mut states: Vec<Option<ExitStatus>> = vec![None; children.len()];
    let mut failed: Option<(usize, String)> = None;
    loop {
        let caught = i32::try_from(CAUGHT.load(Ordering::SeqCst)).unwrap_or(i32::MAX);
        if caught != 0 {
            let name = Signal::try_from(caught).map_or("a signal", |s| s.as_str());
            eprintln!("parma launch: got {name}; stopping the nodes");
            let note = stop(children, &mut states, grace);
            eprintln!("parma launch: stopped {note}");
            return ExitCode::from(128u8.saturating_add(caught as u8));
        }
        for (rank, child) in children.iter_mut().enumerate() {
            if states[rank].is_some() {
                continue;
            }
            match child.try_wait() {
                Ok(Some(status)) => {
                    states[rank] = Some(status);
                    if !status.success() && failed.is_none() {
                        failed = Some((rank, describe(status)));
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    // Cannot tell: treat it as failed, and stop it with the others.
                    failed.get_or_insert((rank, format!("could not be waited for ({e})")));
                }
            }
        }
        if let Some((rank, how)) = &failed {
            let note = stop(children, &mut states, grace);
            eprintln!("parma launch: rank {rank} {how}; stopped {note}");
            return ExitCode::FAILURE;
        }
        if states.iter().all(Option::is_some) {
            return ExitCode::SUCCESS;
        }
        thread::sleep(POLL);
    }
}

/// Sends SIGTERM to every child still running, SIGKILL to those left after `grace`, and
/// reaps them. Says what it did, for the launcher's last line.
fn stop(children: &mut [Child], states: &mut [Option<ExitStatus>], grace: Duration) -> String {
    let running = |states: &[Option<ExitStatus>]| -> Vec<usize> {
        states.iter().enumerate().filter(|(_, s)| s.is_none()).map(|(i, _)| i).collect()
    };
    let termed = running(states);
    for &rank in &termed {
        send(&children[rank], Signal::SIGTERM);
    }
    reap(children, states, Instant::now() + grace);
    let killed = running(states);
    for &rank in &killed {
        send(&children[rank], Signal::SIGKILL);
    }
    reap(children, states, Instant::now() + LINGER);
    let left = running(states);
    let mut note = match termed.len() {
        0 => "no other node (none was running)".to_string(),
        _ => format!("ranks {} with SIGTERM", list(&termed)),
    };
    if !killed.is_empty() {
        note += &format!(", then ranks {} with SIGKILL after {:.1} s", list(&killed), grace.as_secs_f64());
    }
    if !left.is_empty() {
        note += &format!("; ranks {} could not be reaped", list(&left));
    }
    note
}

/// Waits until every child exited or `until`.
fn reap(children: &mut [Child], states: &mut [Option<ExitStatus>], until: Instant) {
    loop {
        for (child, state) in children.iter_mut().zip(states.iter_mut()) {
            if state.is_none() {
                if let Ok(Some(status)) = child.try_wait() {
                    *state = Some(status);
                }
            }
        }
        if states.iter().all(Option::is_some) || Instant::now() >= until {
            return;
        }
        thread::sleep(POLL);
    }
}

fn send(child: &Child, sig: Signal) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // It may have exited meanwhile (and not been reaped: its pid is still its own).
        let _ = signal::kill(Pid::from_raw(pid), sig);
    }
}

fn list(ranks: &[usize]) -> String {
    ranks.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ")
}

/// How a child ended, for a message: `exited with status 3`, `was killed by SIGKILL`.
fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => match Signal::try_from(sig) {
            Ok(s) => format!("was killed by {}", s.as_str()),
            Err(_) => format!("was killed by signal {sig}"),
        },
        (None, None) => format!("ended ({status})"),
    }
}

/// Copies a child's output line by line behind `[rank] ` on a thread; tells `done` at the end.
fn pump(mut from: impl Read + Send + 'static, rank: u16, stderr: bool, done: mpsc::Sender<()>) {
    // Without the thread the pipe is not read: a child that fills it blocks, and is stopped
    // with the others in the end. Nothing else to do if it cannot be spawned.
    let _ = thread::Builder::new().name(format!("parma-launch-out-{rank}")).spawn(move || {
        let prefix = format!("[{rank}] ");
        let mut line: Vec<u8> = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            for &b in &buf[..n] {
                line.push(b);
                if b == b'\n' || line.len() >= LINE_LEN_MAX {
                    emit(&prefix, &mut line, stderr);
                }
            }
        }
        if !line.is_empty() {
            line.push(b'\n');
            emit(&prefix, &mut line, stderr);
        }
        let _ = done.send(());
    });
}

/// Writes one prefixed line (a write error, e.g. a closed pipe, drops it: the child must not
/// block on its output), prefix and line in one write: the launcher's stdout and stderr are
/// often the same file, and a prefix written apart could land inside another rank's line.
fn emit(prefix: &str, line: &mut Vec<u8>, stderr: bool) {
    if line.last() != Some(&b'\n') {
        line.push(b'\n');
    }
    let mut whole = Vec::with_capacity(prefix.len() + line.len());
    whole.extend_from_slice(prefix.as_bytes());
    whole.extend_from_slice(line);
    let _ = if stderr {
        std::io::stderr().lock().write_all(&whole)
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(&whole).and_then(|()| out.flush())
    };
    line.clear();
}

/// In a child of `parma launch` (its environment names the launcher), makes this process get
/// SIGTERM when the launcher dies, even of a SIGKILL that it cannot catch (Linux: the
/// parent-death signal, sent when the thread that spawned the child ends; `launch` spawns
/// from the main thread, which lives as long as the launcher). Called first thing in `main`,
/// before any thread starts; does nothing in a process the launcher did not start.
///
/// The child sets it on itself, after exec, rather than between fork and exec (which takes
/// `unsafe` code): the same guarantee, as the launcher may die before either and the child
/// then sees another parent and exits. The variable is removed, so that a process this one
/// starts does not take this one for the launcher.
#[cfg(target_os = "linux")]
pub(crate) fn die_with_launcher() {
    let Some(launcher) = std::env::var_os(LAUNCHER_PID) else { return };
    // Single-threaded here: nothing reads the environment meanwhile.
    std::env::remove_var(LAUNCHER_PID);
    let launcher = launcher.to_str().and_then(|p| p.parse::<i32>().ok());
    if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGTERM) {
        eprintln!("parma: cannot ask for a signal when the launcher dies: {e}");
        std::process::exit(2);
    }
    // The launcher may have died before the call: then nobody would send the signal.
    if launcher != Some(nix::unistd::getppid().as_raw()) {
        eprintln!("parma: the launcher is gone; exiting");
        std::process::exit(2);
    }
}

/// On other systems a child does not follow the launcher.
#[cfg(not(target_os = "linux"))]
pub(crate) fn die_with_launcher() {}

/// Installs the handlers that record SIGINT, SIGTERM and SIGHUP for `supervise`.
fn catch_signals() -> Result<(), String> {
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        let n = sig as i32;
        let value = usize::try_from(n).unwrap_or(usize::MAX);
        signal_hook::flag::register_usize(n, &CAUGHT, value)
            .map_err(|e| format!("cannot catch {sig}: {e}"))?;
    }
    Ok(())
}

#[derive(Args, Debug)]
pub(crate) struct ProbeArgs {
    /// The rank that fails.
    #[arg(long)]
    fail_rank: Option<u16>,
    /// Its exit status.
    #[arg(long, default_value_t = 1)]
    exit_code: u8,
    /// How long the failing rank waits before it exits, in ms.
    #[arg(long, default_value_t = 0)]
    fail_after_ms: u64,
    /// How long the other ranks sleep before they exit successfully, in ms.
    #[arg(long, default_value_t = 0)]
    sleep_ms: u64,
    /// Ignore SIGTERM (to test the launcher's SIGKILL).
    #[arg(long)]
    ignore_term: bool,
    /// Meet the other ranks at the rendezvous and print the peer table.
    #[arg(long)]
    rendezvous: bool,
}

/// `parma launch-probe`: prints what the launcher told it, optionally meets the others at
/// the rendezvous, then exits as asked.
pub(crate) fn probe(args: &ProbeArgs) -> ExitCode {
    if args.ignore_term {
        // A handler that only records the signal: SIGTERM no longer ends the process.
        if let Err(e) = signal_hook::flag::register(Signal::SIGTERM as i32, Arc::new(AtomicBool::new(false)))
        {
            eprintln!("launch-probe: cannot ignore SIGTERM: {e}");
            return ExitCode::from(2);
        }
    }
    let (launch, token) = match (Launch::from_process_env(), ClusterToken::from_process_env()) {
        (Ok(l), Ok(t)) => (l, t),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("launch-probe: {e}");
            return ExitCode::from(2);
        }
    };
    let rank = launch.rank().map_or(u16::MAX, |r| r.0);
    println!("rank {rank} of {}, pid {}", launch.world(), std::process::id());
    eprintln!("probe stderr of rank {rank}");
    if args.rendezvous {
        let endpoint = format!("probe://rank-{rank}");
        match establish(&launch, &endpoint, 0x9e0b, &token, Duration::from_secs(20)) {
            Ok(table) => {
                let endpoints: Vec<&str> = table.iter().map(|(_, e)| e).collect();
                println!("table: {table}: {}", endpoints.join(" "));
            }
            Err(e) => {
                eprintln!("launch-probe: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if args.fail_rank == Some(rank) {
        thread::sleep(Duration::from_millis(args.fail_after_ms));
        return ExitCode::from(args.exit_code);
    }
    thread::sleep(Duration::from_millis(args.sleep_ms));
    ExitCode::SUCCESS
}

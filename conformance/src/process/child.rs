//! One agent process as the executor sees it: its pipes, its last words, and its end.

use std::collections::VecDeque;
use std::io::{BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use parma_core::NodeId;

use super::wire::{read_line, Request, Response};

/// Lines of an agent's stderr kept for the report when it misbehaves.
const STDERR_LINES_KEPT: usize = 20;
/// Longest wait for an agent to be reaped after SIGKILL, or to exit after `Shutdown`.
pub const EXIT_WAIT: Duration = Duration::from_secs(10);
/// Pause between two looks at an agent that should exit.
const EXIT_POLL: Duration = Duration::from_millis(5);
/// Longest wait for an exited agent's last lines on stderr.
const STDERR_WAIT: Duration = Duration::from_millis(500);

/// A running agent process, killed and reaped when dropped.
pub struct AgentProcess {
    node: NodeId,
    child: Child,
    stdin: ChildStdin,
    /// The lines of its stdout, or why one could not be read; closed at its end.
    lines: Receiver<Result<String, String>>,
    stderr: Arc<Mutex<Stderr>>,
    exited: Option<ExitStatus>,
}

/// The last lines of an agent's stderr, and whether it ended.
#[derive(Default)]
struct Stderr {
    tail: VecDeque<String>,
    ended: bool,
}

impl AgentProcess {
    /// Starts `cmd` as the agent of `node`, with piped stdin, stdout and stderr.
    pub fn spawn(node: NodeId, mut cmd: Command) -> Result<AgentProcess, String> {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| format!("cannot start the agent of node {}: {e}", node.0))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("the agent of node {} has no pipes", node.0));
        };
        let (tx, lines) = mpsc::channel();
        let name = format!("parma-agent-out-{}", node.0);
        let spawned = thread::Builder::new().name(name).spawn(move || {
            let mut out = BufReader::new(stdout);
            loop {
                let (line, more) = match read_line(&mut out) {
                    Ok(Some(line)) => (Ok(line), true),
                    Ok(None) => return,
                    Err(e) => (Err(e), false),
                };
                if tx.send(line).is_err() || !more {
                    return;
                }
            }
        });
        let kept = Arc::new(Mutex::new(Stderr::default()));
        let tail = kept.clone();
        let spawned = spawned.and_then(|_| {
            thread::Builder::new().name(format!("parma-agent-err-{}", node.0)).spawn(move || {
                let mut err = BufReader::new(stderr);
                while let Ok(Some(line)) = read_line(&mut err) {
                    let mut t = lock(&tail);
                    if t.tail.len() == STDERR_LINES_KEPT {
                        t.tail.pop_front();
                    }
                    t.tail.push_back(line);
                }
                lock(&tail).ended = true;
            })
        });
        let agent = AgentProcess { node, child, stdin, lines, stderr: kept, exited: None };
        // Dropping `agent` kills it, which ends a reader thread that did start.
        spawned.map_err(|e| format!("cannot start a thread for the agent of node {}: {e}", node.0))?;
        Ok(agent)
    }

    /// Writes one line to the agent's stdin.
    pub fn send_line(&mut self, line: &str) -> Result<(), String> {
        let written = writeln!(self.stdin, "{line}").and_then(|()| self.stdin.flush());
        written.map_err(|e| {
            // A broken pipe: it exited, or is about to.
            self.wait_exit(STDERR_WAIT);
            self.trouble(&format!("cannot write to it: {e}"))
        })
    }

    /// Sends one request.
    pub fn send(&mut self, request: &Request) -> Result<(), String> {
        let line = serde_json::to_string(request).map_err(|e| format!("cannot encode a request: {e}"))?;
        self.send_line(&line)
    }

    /// The agent's next response, if it comes before `deadline`.
    pub fn recv(&mut self, deadline: Instant) -> Result<Response, String> {
        let wait = deadline.saturating_duration_since(Instant::now());
        match self.lines.recv_timeout(wait) {
            Ok(Ok(line)) => serde_json::from_str(&line).map_err(|e| {
                self.trouble(&format!("answered a line this executor cannot read ({e}): {line:.200}"))
            }),
            Ok(Err(e)) => Err(self.trouble(&format!("its output broke: {e}"))),
            Err(RecvTimeoutError::Timeout) => Err(self.trouble("did not answer in time")),
            Err(RecvTimeoutError::Disconnected) => {
                // Its output ended: it exited, or is about to.
                self.wait_exit(EXIT_WAIT);
                Err(self.trouble("stopped answering"))
            }
        }
    }

    /// Waits up to `wait` for the agent to exit; its status, if it did.
    pub fn wait_exit(&mut self, wait: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + wait;
        while self.exited.is_none() {
            match self.child.try_wait() {
                Ok(Some(status)) => self.exited = Some(status),
                Ok(None) if Instant::now() < until => thread::sleep(EXIT_POLL),
                _ => break,
            }
        }
        self.exited
    }

    /// Stops the agent now, as a crash would (SIGKILL), and reaps it.
    pub fn kill(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
            self.wait_exit(EXIT_WAIT);
        }
    }

    /// What went wrong with this agent, with how it exited and its last words on stderr.
    pub fn trouble(&mut self, what: &str) -> String {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        let status = match self.exited {
            Some(s) => {
                // Its last words may still be on their way to the stderr thread.
                let until = Instant::now() + STDERR_WAIT;
                while !lock(&self.stderr).ended && Instant::now() < until {
                    thread::sleep(EXIT_POLL);
                }
                format!(" (it exited: {s})")
            }
            None => String::new(),
        };
        let err = lock(&self.stderr);
        let said = if err.tail.is_empty() {
            String::new()
        } else {
            format!("; its stderr ends:\n  {}", err.tail.iter().cloned().collect::<Vec<_>>().join("\n  "))
        };
        format!("the agent of node {}: {what}{status}{said}", self.node.0)
    }
}

fn lock(m: &Mutex<Stderr>) -> std::sync::MutexGuard<'_, Stderr> {
    // Lines are only appended: a panic elsewhere leaves them readable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

//! The cluster token: the secret every node of one cluster holds, and the keyed hash that
//! proves it without sending it.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use parma_core::session::{Token, PROOF_LEN};
use parma_core::NodeId;
use rand::RngCore;
use sha2::Sha256;

use super::StartupError;

/// The variable naming a file that holds the token.
pub const TOKEN_FILE_VAR: &str = "PARMA_TOKEN_FILE";
/// The variable holding the token itself.
pub const TOKEN_VAR: &str = "PARMA_TOKEN";
/// The longest token file read, in bytes.
pub const TOKEN_FILE_LEN_MAX: usize = 4096;

/// Prefix of the message hashed for [`Token::prove`] (the session layer's handshake).
const SESSION_LABEL: &[u8; 20] = b"parma session v1\0\0\0\0";
/// Prefix of the message hashed for the rendezvous's handshake; a proof of one never passes
/// for a proof of the other.
const RENDEZVOUS_LABEL: &[u8; 20] = b"parma rendezvous v1\0";

type HmacSha256 = Hmac<Sha256>;

/// The shared secret of one cluster.
///
/// Loaded from a file ([`TOKEN_FILE_VAR`] or an explicit path) or from [`TOKEN_VAR`], never
/// from a command-line argument (which every user of the machine can read in the process
/// list). The token's bytes are the file's contents without trailing whitespace, or the
/// variable's value. `Debug` does not show them.
///
/// As a [`Token`] it computes HMAC-SHA-256 under the token's bytes of this 40-byte message:
/// `b"parma session v1\0\0\0\0"`, then `nonce` (u64), `prover` (u16), `verifier` (u16) and
/// `digest` (u64), all little-endian.
#[derive(Clone)]
pub struct ClusterToken {
    secret: Box<[u8]>,
}

impl fmt::Debug for ClusterToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterToken(<secret>)")
    }
}

impl ClusterToken {
    /// A token of the given bytes; refuses an empty one. For tests and embedders: a token
    /// given on a command line is visible to every user of the machine.
    pub fn from_secret(secret: impl Into<Vec<u8>>) -> Result<ClusterToken, StartupError> {
        let secret = secret.into();
        if secret.is_empty() {
            return Err(StartupError::EmptyToken { from: "the given secret".into() });
        }
        Ok(ClusterToken { secret: secret.into_boxed_slice() })
    }

    /// The token named by the environment that `get` reads: the file at `PARMA_TOKEN_FILE`,
    /// or the value of `PARMA_TOKEN`. Exactly one of them must be set (an empty value counts
    /// as unset).
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<ClusterToken, StartupError> {
        let get = |name| get(name).filter(|v| !v.is_empty());
        match (get(TOKEN_FILE_VAR), get(TOKEN_VAR)) {
            (Some(_), Some(_)) => Err(StartupError::TwoTokens),
            (Some(path), None) => ClusterToken::from_file(Path::new(&path)),
            (None, Some(value)) => ClusterToken::from_secret(value.into_bytes()),
            (None, None) => Err(StartupError::NoToken),
        }
    }

    /// [`ClusterToken::from_env`] on this process's environment.
    pub fn from_process_env() -> Result<ClusterToken, StartupError> {
        ClusterToken::from_env(|name| std::env::var(name).ok())
    }

    /// The token in the file at `path`, without trailing whitespace. Refuses a file that
    /// group or others may read or write (as ssh does with private keys), a file larger than
    /// [`TOKEN_FILE_LEN_MAX`] and an empty token.
    pub fn from_file(path: &Path) -> Result<ClusterToken, StartupError> {
        let file_err = |error| StartupError::TokenFile { path: path.to_path_buf(), error };
        let file = std::fs::File::open(path).map_err(file_err)?;
        // The opened file's metadata: what was checked is what is read.
        check_mode(path, &file.metadata().map_err(file_err)?)?;
        let mut bytes = Vec::new();
        file.take(TOKEN_FILE_LEN_MAX as u64 + 1).read_to_end(&mut bytes).map_err(file_err)?;
        if bytes.len() > TOKEN_FILE_LEN_MAX {
            return Err(StartupError::TokenFileTooLarge {
                path: path.to_path_buf(),
                len_max: TOKEN_FILE_LEN_MAX,
            });
        }
        let len = bytes.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(0, |i| i + 1);
        bytes.truncate(len);
        if bytes.is_empty() {
            return Err(StartupError::EmptyToken { from: format!("the file {}", path.display()) });
        }
        Ok(ClusterToken { secret: bytes.into_boxed_slice() })
    }

    /// A fresh random token (32 bytes from the operating system, as 64 hex digits), for a
    /// launcher that starts every node itself.
    pub fn generate() -> ClusterToken {
        let mut raw = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut raw);
        let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        ClusterToken { secret: hex.into_bytes().into_boxed_slice() }
    }

    /// Hands the token to a child process in `PARMA_TOKEN` (and removes `PARMA_TOKEN_FILE`
    /// from its environment, so that the child reads this token). The environment of a
    /// process is readable only by its user and root.
    pub fn export(&self, cmd: &mut std::process::Command) {
        cmd.env_remove(TOKEN_FILE_VAR).env(TOKEN_VAR, os_str(&self.secret));
    }

    /// The rendezvous's proof by `side` (`b'S'` the server, `b'C'` the client) over the
    /// handshake's `transcript`: HMAC-SHA-256 of `b"parma rendezvous v1\0"`, the side byte
    /// and the transcript.
    pub(crate) fn prove_rendezvous(&self, side: u8, transcript: &[u8]) -> [u8; PROOF_LEN] {
        let mut mac = self.mac();
        mac.update(RENDEZVOUS_LABEL);
        mac.update(&[side]);
        mac.update(transcript);
        mac.finalize().into_bytes().into()
    }

    /// Whether `proof` is `side`'s proof over `transcript`, compared in constant time.
    pub(crate) fn verify_rendezvous(&self, side: u8, transcript: &[u8], proof: &[u8; PROOF_LEN]) -> bool {
        let mut mac = self.mac();
        mac.update(RENDEZVOUS_LABEL);
        mac.update(&[side]);
        mac.update(transcript);
        mac.verify_slice(proof).is_ok()
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
        match HmacSha256::new_from_slice(&self.secret) {
            Ok(mac) => mac,
            Err(_) => unreachable!("HMAC accepts keys of every length"),
        }
    }
}

impl Token for ClusterToken {
    fn prove(&self, nonce: u64, prover: NodeId, verifier: NodeId, digest: u64) -> [u8; PROOF_LEN] {
        let mut msg = [0u8; 40];
        msg[..20].copy_from_slice(SESSION_LABEL);
        msg[20..28].copy_from_slice(&nonce.to_le_bytes());
        msg[28..30].copy_from_slice(&prover.0.to_le_bytes());
        msg[30..32].copy_from_slice(&verifier.0.to_le_bytes());
        msg[32..40].copy_from_slice(&digest.to_le_bytes());
        let mut mac = self.mac();
        mac.update(&msg);
        mac.finalize().into_bytes().into()
    }
}

#[cfg(unix)]
fn os_str(bytes: &[u8]) -> &std::ffi::OsStr {
    std::os::unix::ffi::OsStrExt::from_bytes(bytes)
}

#[cfg(not(unix))]
fn os_str(bytes: &[u8]) -> std::ffi::OsString {
    String::from_utf8_lossy(bytes).into_owned().into()
}

#[cfg(unix)]
fn check_mode(path: &Path, meta: &std::fs::Metadata) -> Result<(), StartupError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(StartupError::TokenFileMode { path: PathBuf::from(path), mode });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_mode(_path: &Path, _meta: &std::fs::Metadata) -> Result<(), StartupError> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    #[cfg(unix)]
    /// A file in a fresh directory under the target's temporary directory, with `mode`.
    fn token_file(name: &str, contents: &[u8], mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("parma-token-test-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, contents).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn the_proof_is_hmac_sha256_of_the_documented_layout() {
        let t = ClusterToken::from_secret(*b"key").unwrap();
        let p = t.prove(0x0102_0304_0506_0708, NodeId(1), NodeId(2), 0x1122_3344_5566_7788);
        let mut msg = SESSION_LABEL.to_vec();
        msg.extend_from_slice(&[
            8, 7, 6, 5, 4, 3, 2, 1, 1, 0, 2, 0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
        ]);
        let mut mac = HmacSha256::new_from_slice(b"key").unwrap();
        mac.update(&msg);
        assert_eq!(p, <[u8; 32]>::from(mac.finalize().into_bytes()));
        // Every input changes it.
        assert_ne!(p, t.prove(0x0102_0304_0506_0709, NodeId(1), NodeId(2), 0x1122_3344_5566_7788));
        assert_ne!(p, t.prove(0x0102_0304_0506_0708, NodeId(2), NodeId(1), 0x1122_3344_5566_7788));
        assert_ne!(p, t.prove(0x0102_0304_0506_0708, NodeId(1), NodeId(2), 0));
        assert_ne!(
            p,
            ClusterToken::from_secret(*b"kez").unwrap().prove(
                0x0102_0304_0506_0708,
                NodeId(1),
                NodeId(2),
                0x1122_3344_5566_7788
            )
        );
    }

    #[test]
    fn rendezvous_proofs_depend_on_side_and_transcript() {
        let t = ClusterToken::from_secret(*b"key").unwrap();
        let p = t.prove_rendezvous(b'S', b"hello");
        assert!(t.verify_rendezvous(b'S', b"hello", &p));
        assert!(!t.verify_rendezvous(b'C', b"hello", &p));
        assert!(!t.verify_rendezvous(b'S', b"hellp", &p));
        assert!(!ClusterToken::from_secret(*b"other").unwrap().verify_rendezvous(b'S', b"hello", &p));
    }

    #[test]
    fn debug_hides_the_secret() {
        let t = ClusterToken::from_secret(*b"hunter2").unwrap();
        let shown = format!("{t:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        let g = ClusterToken::generate();
        assert_eq!(g.secret.len(), 64);
        assert!(!format!("{g:?}").contains(std::str::from_utf8(&g.secret).unwrap()));
        assert_ne!(g.secret, ClusterToken::generate().secret);
    }

    #[cfg(unix)]
    #[test]
    fn from_env_takes_exactly_one_source() {
        let t = ClusterToken::from_env(env(&[("PARMA_TOKEN", "s3cret")])).unwrap();
        assert_eq!(&*t.secret, b"s3cret");
        let e = ClusterToken::from_env(env(&[])).unwrap_err().to_string();
        assert!(e.contains("PARMA_TOKEN_FILE") && e.contains("PARMA_TOKEN"), "{e}");
        let e = ClusterToken::from_env(env(&[("PARMA_TOKEN", "")])).unwrap_err();
        assert!(matches!(e, StartupError::NoToken), "{e}");
        let path = token_file("both", b"x", 0o600);
        let both = [("PARMA_TOKEN", "a"), ("PARMA_TOKEN_FILE", path.to_str().unwrap())];
        let e = ClusterToken::from_env(env(&both)).unwrap_err().to_string();
        assert!(e.contains("only one"), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn a_file_token_is_trimmed_and_must_be_private_and_non_empty() {
        let path = token_file("ok", b"abc123\n", 0o600);
        let vars = [("PARMA_TOKEN_FILE", path.to_str().unwrap())];
        assert_eq!(&*ClusterToken::from_env(env(&vars)).unwrap().secret, b"abc123");

        let open = token_file("open", b"abc123\n", 0o644);
        let e = ClusterToken::from_file(&open).unwrap_err().to_string();
        assert!(e.contains("group or others") && e.contains("644") && e.contains("chmod 600"), "{e}");

        let empty = token_file("empty", b" \n\t\n", 0o400);
        let e = ClusterToken::from_file(&empty).unwrap_err().to_string();
        assert!(e.contains("empty") && e.contains(empty.to_str().unwrap()), "{e}");

        let big = token_file("big", &[b'a'; TOKEN_FILE_LEN_MAX + 1], 0o600);
        let e = ClusterToken::from_file(&big).unwrap_err().to_string();
        assert!(e.contains("larger than 4096 bytes"), "{e}");

        let e = ClusterToken::from_file(Path::new("/nonexistent/parma-token")).unwrap_err().to_string();
        assert!(e.contains("cannot read the token file /nonexistent/parma-token"), "{e}");
        for p in [path, open, empty, big] {
            let _ = std::fs::remove_dir_all(p.parent().unwrap());
        }
    }

    #[test]
    fn empty_secrets_are_refused_and_export_sets_the_child_env() {
        assert!(matches!(ClusterToken::from_secret(Vec::new()), Err(StartupError::EmptyToken { .. })));
        let t = ClusterToken::from_secret(*b"abc").unwrap();
        let mut cmd = std::process::Command::new("true");
        cmd.env(TOKEN_FILE_VAR, "/somewhere");
        t.export(&mut cmd);
        let envs: Vec<_> = cmd.get_envs().map(|(k, v)| (k.to_owned(), v.map(|v| v.to_owned()))).collect();
        assert!(envs.contains(&(TOKEN_VAR.into(), Some("abc".into()))), "{envs:?}");
        assert!(envs.contains(&(TOKEN_FILE_VAR.into(), None)), "{envs:?}");
    }
}

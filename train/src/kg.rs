//! Knowledge graphs in the LibKGE layout: a directory with `train.txt`, `valid.txt` and
//! `test.txt`, one triple per line, `head<TAB>relation<TAB>tail`, names in plain text.
//!
//! Entities and relations are numbered in the order of their first appearance, train first,
//! then valid, then test, so the numbering of a directory never changes. An entity or relation
//! that appears only in valid or test still gets a number (its embedding is then never
//! trained; the filtered ranking still ranks against it, as LibKGE does with its full
//! entity map).

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// One triple: head entity, relation, tail entity, by number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Triple {
    /// Head entity.
    pub head: u32,
    /// Relation.
    pub rel: u32,
    /// Tail entity.
    pub tail: u32,
}

/// A knowledge graph with its three splits.
#[derive(Clone, Debug, Default)]
pub struct Kg {
    /// Entity names, by number.
    pub entities: Vec<String>,
    /// Relation names, by number.
    pub relations: Vec<String>,
    /// Training triples, in file order.
    pub train: Vec<Triple>,
    /// Validation triples, in file order.
    pub valid: Vec<Triple>,
    /// Test triples, in file order.
    pub test: Vec<Triple>,
}

/// Why a knowledge graph could not be loaded.
#[derive(Debug)]
pub enum KgError {
    /// A file could not be read.
    Io {
        /// The file.
        file: PathBuf,
        /// What went wrong.
        error: std::io::Error,
    },
    /// A line is not `head<TAB>relation<TAB>tail`.
    Line {
        /// The file.
        file: PathBuf,
        /// The line's number, from 1.
        line: usize,
        /// What is wrong with it.
        what: String,
    },
    /// The training split has no triple.
    EmptyTrain {
        /// The file.
        file: PathBuf,
    },
    /// More entities or relations than the numbering holds.
    TooMany {
        /// The file.
        file: PathBuf,
    },
}

impl fmt::Display for KgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KgError::Io { file, error } => write!(f, "cannot read {}: {error}", file.display()),
            KgError::Line { file, line, what } => write!(f, "{}:{line}: {what}", file.display()),
            KgError::EmptyTrain { file } => write!(f, "{}: no triple to train on", file.display()),
            KgError::TooMany { file } => {
                write!(f, "{}: more than 2^31 entities or relations", file.display())
            }
        }
    }
}

impl std::error::Error for KgError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            KgError::Io { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Names to numbers, in order of first appearance.
#[derive(Default)]
struct Names {
    index: HashMap<String, u32>,
    names: Vec<String>,
}

impl Names {
    fn id(&mut self, name: &str) -> Option<u32> {
        if let Some(&i) = self.index.get(name) {
            return Some(i);
        }
        let i = u32::try_from(self.names.len()).ok().filter(|i| *i < (1 << 31))?;
        self.index.insert(name.to_string(), i);
        self.names.push(name.to_string());
        Some(i)
    }
}

impl Kg {
    /// Loads `dir/train.txt`, `dir/valid.txt` and `dir/test.txt`.
    pub fn load(dir: &Path) -> Result<Kg, KgError> {
        let mut texts = Vec::with_capacity(3);
        for name in ["train.txt", "valid.txt", "test.txt"] {
            let file = dir.join(name);
            let text =
                std::fs::read_to_string(&file).map_err(|error| KgError::Io { file: file.clone(), error })?;
            texts.push((file, text));
        }
        Kg::parse_splits(dir, texts.iter().map(|(f, t)| (f.as_path(), t.as_str())))
    }

    /// A data set shipped with parma (`umls`, `kinships`, `nations`), built into the binary so
    /// that it works from any directory; `None` for another name.
    pub fn shipped(name: &str) -> Option<Kg> {
        let texts = SHIPPED.iter().find(|(n, _)| *n == name)?.1;
        let dir = Path::new("train/data/kg").join(name);
        let files: Vec<PathBuf> =
            ["train.txt", "valid.txt", "test.txt"].iter().map(|f| dir.join(f)).collect();
        let kg = Kg::parse_splits(&dir, files.iter().map(PathBuf::as_path).zip(texts));
        Some(kg.expect("the shipped data sets are well-formed (tested)"))
    }

    /// Numbers the names of the three splits' texts (train, valid, test) in order.
    fn parse_splits<'a>(dir: &Path, texts: impl Iterator<Item = (&'a Path, &'a str)>) -> Result<Kg, KgError> {
        let (mut ents, mut rels) = (Names::default(), Names::default());
        let mut splits = Vec::with_capacity(3);
        for (file, text) in texts {
            splits.push(parse(file, text, &mut ents, &mut rels)?);
        }
        let test = splits.pop().expect("three splits");
        let valid = splits.pop().expect("three splits");
        let train = splits.pop().expect("three splits");
        if train.is_empty() {
            return Err(KgError::EmptyTrain { file: dir.join("train.txt") });
        }
        Ok(Kg { entities: ents.names, relations: rels.names, train, valid, test })
    }

    /// Builds a graph from numbered triples (for generated data); names are the numbers.
    pub fn from_triples(
        entities: u32,
        relations: u32,
        train: Vec<Triple>,
        valid: Vec<Triple>,
        test: Vec<Triple>,
    ) -> Kg {
        Kg {
            entities: (0..entities).map(|e| format!("e{e}")).collect(),
            relations: (0..relations).map(|r| format!("r{r}")).collect(),
            train,
            valid,
            test,
        }
    }

    /// Number of entities.
    pub fn n_entities(&self) -> u32 {
        self.entities.len() as u32
    }

    /// Number of relations.
    pub fn n_relations(&self) -> u32 {
        self.relations.len() as u32
    }
}

/// Parses one split; blank lines (and a final newline) are skipped, anything else must be three
/// non-empty tab-separated names.
fn parse(file: &Path, text: &str, ents: &mut Names, rels: &mut Names) -> Result<Vec<Triple>, KgError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.trim().is_empty() {
            continue;
        }
        let bad = |what: String| KgError::Line { file: file.to_path_buf(), line: i + 1, what };
        let fields: Vec<&str> = line.split('\t').collect();
        if fields.len() != 3 {
            return Err(bad(format!(
                "expected `head<TAB>relation<TAB>tail`, found {} tab-separated field{}",
                fields.len(),
                if fields.len() == 1 { "" } else { "s" }
            )));
        }
        if let Some(pos) = fields.iter().position(|f| f.trim().is_empty()) {
            let which = ["head", "relation", "tail"][pos];
            return Err(bad(format!("the {which} is empty")));
        }
        let too_many = || KgError::TooMany { file: file.to_path_buf() };
        let head = ents.id(fields[0]).ok_or_else(too_many)?;
        let rel = rels.id(fields[1]).ok_or_else(too_many)?;
        let tail = ents.id(fields[2]).ok_or_else(too_many)?;
        out.push(Triple { head, rel, tail });
    }
    Ok(out)
}

/// The shipped data sets' splits (train, valid, test), from `train/data/kg/`.
const SHIPPED: [(&str, [&str; 3]); 3] = [
    (
        "umls",
        [
            include_str!("../data/kg/umls/train.txt"),
            include_str!("../data/kg/umls/valid.txt"),
            include_str!("../data/kg/umls/test.txt"),
        ],
    ),
    (
        "kinships",
        [
            include_str!("../data/kg/kinships/train.txt"),
            include_str!("../data/kg/kinships/valid.txt"),
            include_str!("../data/kg/kinships/test.txt"),
        ],
    ),
    (
        "nations",
        [
            include_str!("../data/kg/nations/train.txt"),
            include_str!("../data/kg/nations/valid.txt"),
            include_str!("../data/kg/nations/test.txt"),
        ],
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(files: &[(&str, &str)]) -> PathBuf {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "parma-kg-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn shipped_sets_load_with_their_documented_sizes() {
        for (name, e, r, tr, va, te) in [
            ("umls", 135, 46, 5216, 652, 661),
            ("kinships", 104, 25, 8544, 1068, 1074),
            ("nations", 14, 55, 1592, 199, 201),
        ] {
            let kg = Kg::shipped(name).unwrap();
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/kg").join(name);
            let from_files = Kg::load(&dir).unwrap();
            assert_eq!(
                (&kg.entities, &kg.train, &kg.test),
                (&from_files.entities, &from_files.train, &from_files.test)
            );
            assert_eq!(
                (kg.n_entities(), kg.n_relations(), kg.train.len(), kg.valid.len(), kg.test.len()),
                (e, r, tr, va, te),
                "{name}"
            );
        }
        assert!(Kg::shipped("fb15k").is_none());
    }

    #[test]
    fn numbering_follows_first_appearance() {
        let dir = dir_with(&[
            ("train.txt", "a\tr\tb\nb\ts\tc\r\n\n"),
            ("valid.txt", "c\tr\ta\n"),
            ("test.txt", "d\tt\ta"),
        ]);
        let kg = Kg::load(&dir).unwrap();
        assert_eq!(kg.entities, ["a", "b", "c", "d"]);
        assert_eq!(kg.relations, ["r", "s", "t"]);
        assert_eq!(kg.train, [Triple { head: 0, rel: 0, tail: 1 }, Triple { head: 1, rel: 1, tail: 2 }]);
        assert_eq!(kg.test, [Triple { head: 3, rel: 2, tail: 0 }]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn malformed_lines_name_file_and_line() {
        for (line, expect) in [
            ("a\tr\n", "found 2 tab-separated fields"),
            ("a r b\n", "found 1 tab-separated field"),
            ("a\tr\tb\tc\n", "found 4"),
            ("a\t\tb\n", "the relation is empty"),
        ] {
            let dir = dir_with(&[
                ("train.txt", "x\tr\ty\n"),
                ("valid.txt", &format!("x\tr\ty\n{line}")),
                ("test.txt", ""),
            ]);
            let e = Kg::load(&dir).unwrap_err().to_string();
            assert!(e.contains("valid.txt:2: ") && e.contains(expect), "{e}");
            std::fs::remove_dir_all(dir).unwrap();
        }
        let dir = dir_with(&[("train.txt", "\n"), ("valid.txt", ""), ("test.txt", "")]);
        assert!(Kg::load(&dir).unwrap_err().to_string().contains("no triple to train on"));
        let missing = dir.join("nope");
        let e = Kg::load(&missing).unwrap_err().to_string();
        assert!(e.starts_with("cannot read ") && e.contains("train.txt"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}

//! Slurm's host lists, as in `SLURM_JOB_NODELIST`: `node[01-04,07],gpu5` is `node01`,
//! `node02`, `node03`, `node04`, `node07`, `gpu5`.
//!
//! A list is names separated by commas (or whitespace) outside brackets. A name is text and
//! bracket groups; a group holds numbers and ranges `lo-hi` separated by commas, and stands
//! for each of them in turn, zero-padded to the width of `lo` as written (`[08-10]` is 08,
//! 09, 10). A name with several groups (`rack[1-2]-n[1-3]`) stands for every combination, the
//! last group varying fastest.

use std::fmt;

/// The longest number in a range, in digits.
const DIGITS_MAX: usize = 18;

/// Why a host list cannot be read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostlistError {
    /// The list names no host.
    Empty,
    /// A `[` without its `]`, a `]` without its `[`, or a `[` inside a group.
    Brackets,
    /// A group's entry is not a number or a range `lo-hi` with `lo <= hi`.
    Range(String),
    /// The list names more hosts than asked for.
    TooMany(usize),
}

impl fmt::Display for HostlistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostlistError::Empty => f.write_str("the host list names no host"),
            HostlistError::Brackets => f.write_str("unbalanced or nested brackets"),
            HostlistError::Range(r) => write!(f, "`{r}` is not a number or a range lo-hi with lo <= hi"),
            HostlistError::TooMany(max) => write!(f, "more than {max} hosts"),
        }
    }
}

impl std::error::Error for HostlistError {}

/// A piece of a name: text, or a group of numbers `(lo, hi, width)`.
enum Piece<'a> {
    Text(&'a str),
    Group(Vec<(u64, u64, usize)>),
}

/// Every host of `list`, in order; refuses a list of more than `max` hosts.
pub fn expand(list: &str, max: usize) -> Result<Vec<String>, HostlistError> {
    let mut hosts = Vec::new();
    for name in split_names(list)? {
        let pieces = parse_name(name)?;
        let count = pieces.iter().try_fold(1usize, |n, p| match p {
            Piece::Text(_) => Some(n),
            Piece::Group(g) => n.checked_mul(group_len(g)?),
        });
        match count {
            Some(n) if n <= max - hosts.len().min(max) => expand_name(&pieces, &mut hosts),
            _ => return Err(HostlistError::TooMany(max)),
        }
    }
    if hosts.is_empty() {
        return Err(HostlistError::Empty);
    }
    Ok(hosts)
}

/// The first host of `list` (the whole list must be well formed).
pub fn first(list: &str) -> Result<String, HostlistError> {
    let names = split_names(list)?;
    let mut parsed = Vec::with_capacity(names.len());
    for name in names {
        parsed.push(parse_name(name)?);
    }
    let pieces = parsed.first().ok_or(HostlistError::Empty)?;
    let mut host = String::new();
    for p in pieces {
        match p {
            Piece::Text(t) => host.push_str(t),
            Piece::Group(g) => {
                let (lo, _, width) = g[0];
                host.push_str(&format!("{lo:0width$}"));
            }
        }
    }
    Ok(host)
}

/// The names of `list`: split at commas and whitespace outside brackets.
fn split_names(list: &str) -> Result<Vec<&str>, HostlistError> {
    let mut names = Vec::new();
    let (mut depth, mut start) = (0u32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' if depth == 0 => depth = 1,
            ']' if depth == 1 => depth = 0,
            '[' | ']' => return Err(HostlistError::Brackets),
            ',' | ' ' | '\t' | '\n' if depth == 0 => {
                names.push(&list[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(HostlistError::Brackets);
    }
    names.push(&list[start..]);
    names.retain(|n| !n.is_empty());
    Ok(names)
}

/// One name's pieces; its brackets are balanced and not nested (see `split_names`).
fn parse_name(name: &str) -> Result<Vec<Piece<'_>>, HostlistError> {
    let mut pieces = Vec::new();
    let mut rest = name;
    while let Some(open) = rest.find('[') {
        let close = rest[open..].find(']').ok_or(HostlistError::Brackets)? + open;
        if open > 0 {
            pieces.push(Piece::Text(&rest[..open]));
        }
        let group = rest[open + 1..close].split(',').map(parse_range).collect::<Result<Vec<_>, _>>()?;
        pieces.push(Piece::Group(group));
        rest = &rest[close + 1..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest));
    }
    Ok(pieces)
}

/// `7` or `01-04`: `(lo, hi, width of lo)`.
fn parse_range(r: &str) -> Result<(u64, u64, usize), HostlistError> {
    let bad = || HostlistError::Range(r.to_string());
    let number = |s: &str| {
        if s.is_empty() || s.len() > DIGITS_MAX || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse::<u64>().map_err(|_| bad())
    };
    let (lo_text, hi) = match r.split_once('-') {
        Some((lo, hi)) => (lo, number(hi)?),
        None => (r, number(r)?),
    };
    let lo = number(lo_text)?;
    if lo > hi {
        return Err(bad());
    }
    Ok((lo, hi, lo_text.len()))
}

/// How many numbers a group stands for; `None` if it does not fit a `usize`.
fn group_len(group: &[(u64, u64, usize)]) -> Option<usize> {
    group
        .iter()
        .try_fold(0usize, |n, (lo, hi, _)| n.checked_add(usize::try_from(hi - lo).ok()?.checked_add(1)?))
}

/// Appends every combination of `pieces` to `out` (the caller checked the count).
fn expand_name(pieces: &[Piece<'_>], out: &mut Vec<String>) {
    let mut prefixes = vec![String::new()];
    for p in pieces {
        prefixes = match p {
            Piece::Text(t) => prefixes.into_iter().map(|s| s + t).collect(),
            Piece::Group(g) => prefixes
                .iter()
                .flat_map(|s| {
                    g.iter().flat_map(move |&(lo, hi, w)| (lo..=hi).map(move |n| format!("{s}{n:0w$}")))
                })
                .collect(),
        };
    }
    out.extend(prefixes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_expand_in_order_with_padding() {
        assert_eq!(
            expand("node[01-04,07],gpu5", 100).unwrap(),
            ["node01", "node02", "node03", "node04", "node07", "gpu5"]
        );
        assert_eq!(expand("n[8-11]", 100).unwrap(), ["n8", "n9", "n10", "n11"]);
        assert_eq!(expand("n[08-10]", 100).unwrap(), ["n08", "n09", "n10"]);
        assert_eq!(expand("a, b\tc", 100).unwrap(), ["a", "b", "c"]);
        assert_eq!(expand("r[1-2]-n[1-2]x", 100).unwrap(), ["r1-n1x", "r1-n2x", "r2-n1x", "r2-n2x"]);
        assert_eq!(expand("[3-4]", 100).unwrap(), ["3", "4"]);
        assert_eq!(expand("host.example.org", 1).unwrap(), ["host.example.org"]);
    }

    #[test]
    fn first_is_the_first_host() {
        assert_eq!(first("node[01-04,07],gpu5").unwrap(), "node01");
        assert_eq!(first("gpu5,node[01-04]").unwrap(), "gpu5");
        assert_eq!(first("c[007-100]a").unwrap(), "c007a");
        // The whole list must be well formed, and `first` does not expand it.
        assert!(first("a,b[1-").is_err());
        assert_eq!(first("n[0-999999999999999999]").unwrap(), "n0");
    }

    #[test]
    fn bad_lists_are_errors_not_panics() {
        for (list, err) in [
            ("", HostlistError::Empty),
            (" , ", HostlistError::Empty),
            ("n[1-2", HostlistError::Brackets),
            ("n1-2]", HostlistError::Brackets),
            ("n[1[2]]", HostlistError::Brackets),
            ("n[]", HostlistError::Range(String::new())),
            ("n[4-2]", HostlistError::Range("4-2".into())),
            ("n[a-b]", HostlistError::Range("a-b".into())),
            ("n[1-2-3]", HostlistError::Range("1-2-3".into())),
            ("n[-3]", HostlistError::Range("-3".into())),
            ("n[1234567890123456789]", HostlistError::Range("1234567890123456789".into())),
        ] {
            assert_eq!(expand(list, 100), Err(err.clone()), "{list:?}");
            assert_eq!(first(list).err(), Some(err), "{list:?}");
        }
        assert_eq!(expand("n[1-101]", 100), Err(HostlistError::TooMany(100)));
        assert_eq!(expand("a,n[1-100]", 100), Err(HostlistError::TooMany(100)));
        assert_eq!(
            expand("n[0-999999999999999999][0-999999999999999999]", 100),
            Err(HostlistError::TooMany(100))
        );
        assert_eq!(expand("n[1-100]", 100).unwrap().len(), 100);
    }
}

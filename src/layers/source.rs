//! Reading the crate's own source, for the tests that hold its shape:
//! its files, and their code with comments and strings taken out.

use std::path::{Path, PathBuf};

pub(super) fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The text without comments, and with string literals emptied (a
/// "crate::" in a message or a doc link is no import).
pub(super) fn code(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut in_str = false;
        let mut prev = ' ';
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if in_str {
                if c == '"' && prev != '\\' {
                    in_str = false;
                    out.push('"');
                }
                prev = if prev == '\\' && c == '\\' { ' ' } else { c };
                continue;
            }
            if c == '/' && chars.peek() == Some(&'/') {
                break;
            }
            // A char literal '"' opens no string.
            if c == '"' && prev != '\'' {
                in_str = true;
            }
            out.push(c);
            prev = c;
        }
        out.push('\n');
    }
    out
}

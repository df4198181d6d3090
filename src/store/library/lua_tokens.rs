//! Lua 5.1's tokens, as far as reading its scopes needs (`limits`):
//! names, keywords and symbols; strings and numbers as one kind of
//! literal; comments dropped. A leading `#` line (a library's shebang) is
//! skipped, as Redis does.

/// A token: a name, a keyword, a symbol, or a literal.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Tok {
    Name(String),
    Key(&'static str),
    Sym(String),
    Lit,
}

const KEYWORDS: &[&str] = &[
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "if", "in", "local",
    "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
];

/// The level of a long bracket opening at `s[i..]` (`[[` 0, `[=[` 1, ...).
fn long_open(s: &[u8], i: usize) -> Option<usize> {
    if s.get(i) != Some(&b'[') {
        return None;
    }
    let mut j = i + 1;
    while s.get(j) == Some(&b'=') {
        j += 1;
    }
    (s.get(j) == Some(&b'[')).then_some(j - i - 1)
}

/// Past the long bracket of `level` whose body starts at `i`.
fn long_close(s: &[u8], mut i: usize, level: usize) -> usize {
    let close: Vec<u8> = std::iter::once(b']')
        .chain(std::iter::repeat_n(b'=', level))
        .chain(std::iter::once(b']'))
        .collect();
    while i < s.len() && !s[i..].starts_with(&close) {
        i += 1;
    }
    (i + close.len()).min(s.len())
}

/// The tokens of `text` with their lines; comments and strings dropped to
/// `Lit` (strings) or nothing (comments).
pub(super) fn tokens(text: &str) -> Vec<(Tok, usize)> {
    let s = text.as_bytes();
    let (mut i, mut line, mut out) = (0, 1, Vec::new());
    if s.starts_with(b"#") {
        while i < s.len() && s[i] != b'\n' {
            i += 1;
        }
    }
    let lines = |from: usize, to: usize| s[from..to].iter().filter(|&&c| c == b'\n').count();
    while i < s.len() {
        let c = s[i];
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if s[i..].starts_with(b"--") {
            let start = i;
            i = match long_open(s, i + 2) {
                Some(level) => long_close(s, i + 4 + level, level),
                None => s[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(s.len(), |p| i + p),
            };
            line += lines(start, i);
        } else if let Some(level) = long_open(s, i) {
            let start = i;
            i = long_close(s, i + 2 + level, level);
            line += lines(start, i);
            out.push((Tok::Lit, line));
        } else if c == b'\'' || c == b'"' {
            i += 1;
            while i < s.len() && s[i] != c {
                i += if s[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push((Tok::Lit, line));
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == b'_') {
                i += 1;
            }
            let word = &text[start..i];
            out.push((
                match KEYWORDS.iter().find(|k| **k == word) {
                    Some(k) => Tok::Key(k),
                    None => Tok::Name(word.to_string()),
                },
                line,
            ));
        } else if c.is_ascii_digit() || (c == b'.' && s.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            while i < s.len()
                && (s[i].is_ascii_alphanumeric()
                    || s[i] == b'.'
                    || ((s[i] == b'-' || s[i] == b'+') && matches!(s[i - 1], b'e' | b'E')))
            {
                i += 1;
            }
            out.push((Tok::Lit, line));
        } else {
            let three = ["..."];
            let two = ["==", "~=", "<=", ">=", ".."];
            let len = if three.iter().any(|t| s[i..].starts_with(t.as_bytes())) {
                3
            } else if two.iter().any(|t| s[i..].starts_with(t.as_bytes())) {
                2
            } else {
                1
            };
            out.push((Tok::Sym(text[i..i + len].to_string()), line));
            i += len;
        }
    }
    out
}

//! File lengths: a bound that makes us split files by concept.
//!
//! None over 500 lines in src/ (Rust, Lua and JavaScript alike) and
//! bench/, none over 800 in tests/ (each named by the surface it tests).
//! The bound is there to make a file that holds two concepts split in two,
//! never to make an explanation shorter: a file that holds one concept
//! may pass it if its opening comment says why, in a line that starts
//! with "Why this file is long:" (up to twice the bound).

use std::path::{Path, PathBuf};

/// The marker a long file's opening comment carries, with its reason.
const WHY_LONG: &str = "Why this file is long:";

/// Whether `text` opens with a comment (`//`, `--` or `/*` lines, first
/// lines only) that says why the file is long, with a reason after it.
fn says_why_long(text: &str) -> bool {
    text.lines()
        .take_while(|l| {
            let l = l.trim_start();
            l.is_empty()
                || l.starts_with("//")
                || l.starts_with("--")
                || l.starts_with('*')
                || l.starts_with("/*")
        })
        .filter_map(|l| l.split_once(WHY_LONG))
        .any(|(_, reason)| reason.trim().len() >= 20)
}

#[test]
fn no_file_outgrows_its_bound() {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            // Others' code (npm's, a nested crate's build) is not ours.
            let theirs = p.ends_with("node_modules") || p.ends_with("target");
            if p.is_dir() && !theirs {
                walk(&p, out);
            } else if p
                .extension()
                .is_some_and(|x| ["rs", "lua", "js", "mjs"].contains(&x.to_str().unwrap_or("")))
            {
                out.push(p);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut long = Vec::new();
    for (dir, most) in [("src", 500), ("bench", 500), ("tests", 800)] {
        let mut all = Vec::new();
        walk(&root.join(dir), &mut all);
        for f in all {
            let text = std::fs::read_to_string(&f).unwrap();
            let n = text.lines().count();
            let allowed = if says_why_long(&text) { 2 * most } else { most };
            if n > allowed {
                long.push(format!("{} ({n} lines, bound {allowed})", f.display()));
            }
        }
    }
    assert!(long.is_empty(), "files over their bound: {long:#?}");
}

#[test]
fn a_long_file_says_why_in_its_opening_comment() {
    let why =
        "//! Push.\n//!\n//! Why this file is long: one transition, its checks and its replies.\n";
    assert!(says_why_long(why));
    assert!(says_why_long(
        "-- x.lua\n-- Why this file is long: the arming walk is one loop.\n"
    ));
    // Said after the code starts, or with no reason, it does not count.
    assert!(!says_why_long(
        "//! Push.\nuse x;\n// Why this file is long: one transition.\n"
    ));
    assert!(!says_why_long("//! Why this file is long:\n"));
}

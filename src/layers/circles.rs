//! The import graph between src/'s files, and the test that it has no
//! circle. The layers hold the arrows between top-level modules; this
//! holds them between files, where a circle hides best: inside one module.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use super::source::{code, files};

/// Every path a file names from `crate::`, `super::` or `self::`, each
/// `{...}` group expanded: `super::{a::B, c}` is `super::a::B` and
/// `super::c`. Bare paths (a parent naming its own child modules) are
/// the tree's arrows down and are left out.
fn named_paths(code: &str) -> Vec<Vec<String>> {
    fn ident(s: &str) -> &str {
        let end = s
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        &s[..end]
    }
    // The paths of `s` (a path's text from one segment on) under `prefix`.
    fn expand(s: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let s = s.trim_start();
        if let Some(group) = s.strip_prefix('{') {
            let (mut depth, mut start) = (0, 0);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        expand(&group[start..i], prefix, out);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand(&group[start..i], prefix, out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let name = ident(s);
        if name.is_empty() {
            return;
        }
        let mut path = prefix.to_vec();
        path.push(name.to_owned());
        match s[name.len()..].strip_prefix("::") {
            Some(rest) => expand(rest, &path, out),
            None => out.push(path),
        }
    }
    let mut out = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        for (i, _) in code.match_indices(start) {
            let before = code[..i].chars().next_back().unwrap_or(' ');
            if before.is_alphanumeric() || before == '_' || before == ':' {
                continue; // inside a longer name or path
            }
            expand(&code[i..], &[], &mut out);
        }
    }
    out
}

/// The import graph between src/'s files: for each file (by module
/// path, `store/push.rs` is `store::push`, `store/mod.rs` is `store`),
/// the files whose items it names.
fn file_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut all = Vec::new();
    files(src, &mut all);
    let module = |p: &Path| -> Vec<String> {
        let rel = p.strip_prefix(src).unwrap().with_extension("");
        let mut m: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_str().unwrap().to_owned())
            .collect();
        if m.last()
            .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
        {
            m.pop();
        }
        m
    };
    let modules: BTreeSet<Vec<String>> = all.iter().map(|p| module(p)).collect();
    let mut graph = BTreeMap::new();
    for path in &all {
        let from = module(path);
        let text = code(&std::fs::read_to_string(path).unwrap());
        // Unit tests reach into what they test; they are not the structure.
        let text = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        let mut to = BTreeSet::new();
        for segs in named_paths(text) {
            let mut at = match segs[0].as_str() {
                "crate" => Vec::new(),
                _ => from.clone(),
            };
            let mut rest = &segs[1..];
            if segs[0] == "super" {
                at.pop();
                while rest.first().is_some_and(|s| s == "super") {
                    at.pop();
                    rest = &rest[1..];
                }
            }
            for seg in rest {
                let mut next = at.clone();
                next.push(seg.clone());
                if !modules.contains(&next) {
                    break;
                }
                at = next;
            }
            if at != from && modules.contains(&at) {
                to.insert(at.join("::"));
            }
        }
        graph.insert(from.join("::"), to);
    }
    graph
}

/// The graph's circles: its strongly connected parts of two files or
/// more (Tarjan's algorithm).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: HashMap<&'a str, (usize, usize)>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) -> usize {
            let n = self.index.len();
            self.index.insert(v, (n, n));
            self.stack.push(v);
            self.on_stack.insert(v);
            let mut low = n;
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                match self.index.get(w) {
                    None => low = low.min(self.visit(w)),
                    Some(&(i, _)) if self.on_stack.contains(w) => low = low.min(i),
                    Some(_) => {}
                }
            }
            self.index.insert(v, (n, low));
            if low == n {
                let mut part = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    part.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if part.len() > 1 {
                    part.sort();
                    self.found.push(part);
                }
            }
            low
        }
    }
    let mut walk = Walk {
        graph,
        index: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

/// No two files import each other, even through others: a file can be
/// read knowing only what it imports, and moved or split without
/// pulling the rest along. (Layers hold this between top-level
/// modules; this holds it between files.)
#[test]
fn no_files_import_each_other_in_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = circles(&file_graph(&src));
    let shown: Vec<String> = found
        .iter()
        .map(|c| format!("{} files: {}", c.len(), c.join(", ")))
        .collect();
    assert!(found.is_empty(), "circles:\n{}", shown.join("\n"));
}

#[test]
fn named_paths_expand_groups() {
    let text = "use super::{a::B, c::{d, e::F}};\nlet x = crate::q::r(); self::s::t;\n";
    let got: Vec<String> = named_paths(text).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        got,
        [
            "crate::q::r",
            "super::a::B",
            "super::c::d",
            "super::c::e::F",
            "self::s::t"
        ]
    );
}

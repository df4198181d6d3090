//! What Lua 5.1 (Redis's and Valkey's) allows each function of a text it
//! compiles, read from the text: how many locals one function holds at
//! once (200) and how many variables of the functions around it it reaches
//! (upvalues, 60). Past either, FUNCTION LOAD (and every EVALSHA) fails on
//! every server. The library's main chunk is one function, so its locals
//! are the prelude's names, the helpers' tables and the call's state; a
//! transition reaches as upvalues the names and tables it uses.
//!
//! A reading of Lua's scopes, not a parser: it follows blocks, locals,
//! parameters, loop variables and names, as the compiler counts them
//! (a numeric or generic `for` holds three hidden locals; a function with
//! `...` one, `arg`; an upvalue is one variable, however often used).
//! Checked when written against `luac5.1 -l -l` on the library before and
//! after its helpers became tables (190 and 193 functions): the same
//! upvalues for every function, and locals at most the ones it declares
//! (luac lists every local a function declares, this the most at once).

use std::collections::BTreeSet;

use super::lua_tokens::{tokens, Tok};

/// One function of the text: where it starts, the most locals it holds
/// at once, and the variables of enclosing functions it uses.
#[derive(Debug)]
pub(super) struct Function {
    pub line: usize,
    pub name: String,
    pub locals: usize,
    pub upvalues: usize,
}

/// A block's kind: what its `end` (or `until`) closes.
#[derive(Debug, PartialEq)]
enum Block {
    Function,
    Plain,
    Repeat,
}

struct Func {
    line: usize,
    name: String,
    /// Active locals: (name, id).
    active: Vec<(String, usize)>,
    /// Per open block: its kind and the active count at its start.
    blocks: Vec<(Block, usize)>,
    max: usize,
    upvalues: BTreeSet<usize>,
    /// Locals declared by `local` whose statement has not ended yet.
    pending: Vec<String>,
    /// Brackets open since the pending statement began.
    depth: i32,
    /// A `for`'s variables, declared at its `do`.
    loop_vars: Option<Vec<String>>,
    /// Per open bracket: whether it is a table constructor's.
    braces: Vec<bool>,
    /// Whether the token before ends an expression (so a name or a
    /// keyword after it starts a new statement).
    ends_expr: bool,
}

impl Func {
    fn new(line: usize, name: String) -> Func {
        Func {
            line,
            name,
            active: Vec::new(),
            blocks: vec![(Block::Function, 0)],
            max: 0,
            upvalues: BTreeSet::new(),
            pending: Vec::new(),
            depth: 0,
            loop_vars: None,
            braces: Vec::new(),
            ends_expr: false,
        }
    }
}

struct Reader {
    funcs: Vec<Func>,
    done: Vec<Function>,
    next_id: usize,
}

impl Reader {
    fn declare(&mut self, name: String) {
        let id = self.next_id;
        self.next_id += 1;
        let f = self.funcs.last_mut().expect("a function");
        f.active.push((name, id));
        f.max = f.max.max(f.active.len());
    }

    fn f(&mut self) -> &mut Func {
        self.funcs.last_mut().expect("a function")
    }

    fn activate_pending(&mut self) {
        for name in std::mem::take(&mut self.f().pending) {
            self.declare(name);
        }
    }

    fn open(&mut self, kind: Block) {
        let f = self.funcs.last_mut().expect("a function");
        f.blocks.push((kind, f.active.len()));
    }

    /// Closes the innermost block; a function's returns its figures.
    fn close(&mut self) {
        let f = self.funcs.last_mut().expect("a function");
        let (kind, at) = f.blocks.pop().expect("a block to close");
        f.active.truncate(at);
        if kind == Block::Function && f.blocks.is_empty() {
            let f = self.funcs.pop().expect("a function");
            self.done.push(Function {
                line: f.line,
                name: f.name,
                locals: f.max,
                upvalues: f.upvalues.len(),
            });
        }
    }

    /// A use of the variable `name`: a local of this function, an upvalue
    /// (of this function and each between it and the one that holds it),
    /// or a global.
    fn use_name(&mut self, name: &str) {
        let n = self.funcs.len();
        for k in (0..n).rev() {
            if let Some((_, id)) = self.funcs[k].active.iter().rev().find(|(v, _)| v == name) {
                let id = *id;
                for f in &mut self.funcs[k + 1..] {
                    f.upvalues.insert(id);
                }
                return;
            }
        }
    }
}

/// Every function of `text`, the main chunk first (line 0).
pub(super) fn functions(text: &str) -> Vec<Function> {
    let toks = tokens(text);
    let mut r = Reader {
        funcs: vec![Func::new(0, "the main chunk".into())],
        done: Vec::new(),
        next_id: 0,
    };
    let mut i = 0;
    while i < toks.len() {
        let (tok, line) = &toks[i];
        let prev = i.checked_sub(1).map(|p| &toks[p].0);
        let ends_expr = r.f().ends_expr;
        let starts_statement = match tok {
            Tok::Name(_) => ends_expr,
            Tok::Key(k) => {
                ends_expr
                    || matches!(
                        *k,
                        "local" | "if" | "for" | "while" | "return" | "do" | "repeat" | "break"
                    )
            }
            Tok::Sym(s) => s == ";",
            Tok::Lit => false,
        };
        let closes = matches!(tok, Tok::Key("end" | "else" | "elseif" | "until"));
        let f = r.f();
        if !f.pending.is_empty() && f.depth <= 0 && (starts_statement || closes) {
            r.activate_pending();
        }
        r.f().ends_expr = false;
        let mut ends_expr = false;
        match tok {
            Tok::Key("local") => {
                if toks.get(i + 1).map(|t| &t.0) == Some(&Tok::Key("function")) {
                    if let Some((Tok::Name(name), _)) = toks.get(i + 2) {
                        r.declare(name.clone());
                        r.funcs.push(Func::new(*line, name.clone()));
                        i = params(&mut r, &toks, i + 3, false);
                        continue;
                    }
                }
                r.f().depth = 0;
                let mut j = i + 1;
                while let Some((Tok::Name(name), _)) = toks.get(j) {
                    r.f().pending.push(name.clone());
                    j += 1;
                    if toks.get(j).map(|t| &t.0) == Some(&Tok::Sym(",".into())) {
                        j += 1;
                    } else {
                        break;
                    }
                }
                // No `=`: the names are locals at once.
                if toks.get(j).map(|t| &t.0) != Some(&Tok::Sym("=".into())) {
                    r.activate_pending();
                    r.f().ends_expr = true;
                }
                i = j;
                continue;
            }
            Tok::Key("function") => {
                // `function a.b:c(`, or an anonymous `function (`.
                let mut j = i + 1;
                let mut name = String::new();
                let mut method = false;
                if let Some((Tok::Name(first), _)) = toks.get(j) {
                    r.use_name(first);
                    name.push_str(first);
                    j += 1;
                    while let Some((Tok::Sym(s), _)) = toks.get(j) {
                        if s != "." && s != ":" {
                            break;
                        }
                        method = s == ":";
                        if let Some((Tok::Name(field), _)) = toks.get(j + 1) {
                            name.push_str(s);
                            name.push_str(field);
                        }
                        j += 2;
                    }
                } else {
                    name.push_str("function");
                }
                r.funcs.push(Func::new(*line, name));
                i = params(&mut r, &toks, j, method);
                continue;
            }
            Tok::Key("for") => {
                let mut vars = vec![String::new(), String::new(), String::new()];
                let mut j = i + 1;
                while let Some((t, _)) = toks.get(j) {
                    match t {
                        Tok::Name(n) => vars.push(n.clone()),
                        Tok::Sym(s) if s == "," => {}
                        _ => break,
                    }
                    j += 1;
                }
                r.f().loop_vars = Some(vars);
                i = j;
                continue;
            }
            Tok::Key("do") => {
                r.open(Block::Plain);
                if let Some(vars) = r.f().loop_vars.take() {
                    for v in vars {
                        r.declare(v);
                    }
                }
            }
            Tok::Key("while") => r.f().loop_vars = None,
            Tok::Key("then") => r.open(Block::Plain),
            Tok::Key("repeat") => r.open(Block::Repeat),
            Tok::Key("elseif") => r.close(),
            Tok::Key("else") => {
                r.close();
                r.open(Block::Plain);
            }
            Tok::Key("end") => {
                r.close();
                ends_expr = true;
            }
            Tok::Key("until") => r.close(),
            Tok::Key("true" | "false" | "nil") | Tok::Lit => ends_expr = true,
            Tok::Name(name) => {
                let field = matches!(prev, Some(Tok::Sym(s)) if s == "." || s == ":");
                let key = r.f().braces.last() == Some(&true)
                    && matches!(prev, Some(Tok::Sym(s)) if s == "{" || s == "," || s == ";")
                    && toks.get(i + 1).map(|t| &t.0) == Some(&Tok::Sym("=".into()));
                if !field && !key {
                    r.use_name(name);
                }
                ends_expr = true;
            }
            Tok::Sym(s) => match s.as_str() {
                "(" | "[" | "{" => {
                    let f = r.f();
                    f.depth += 1;
                    f.braces.push(s == "{");
                }
                ")" | "]" | "}" => {
                    let f = r.f();
                    f.depth -= 1;
                    f.braces.pop();
                    ends_expr = true;
                }
                "..." => ends_expr = true,
                _ => {}
            },
            Tok::Key(_) => {}
        }
        // `end` closing a function sets its enclosing function's flag.
        if let Some(f) = r.funcs.last_mut() {
            f.ends_expr |= ends_expr;
        }
        i += 1;
    }
    r.activate_pending();
    while let Some(f) = r.funcs.pop() {
        r.done.push(Function {
            line: f.line,
            name: f.name,
            locals: f.max,
            upvalues: f.upvalues.len(),
        });
    }
    r.done.sort_by_key(|f| f.line);
    r.done
}

/// A function's parameters from `(` at `j`: its first locals (`self` for a
/// method, `arg` for `...`). Returns the index after `)`.
fn params(r: &mut Reader, toks: &[(Tok, usize)], mut j: usize, method: bool) -> usize {
    if method {
        r.declare("self".into());
    }
    j += 1; // (
    while let Some((t, _)) = toks.get(j) {
        j += 1;
        match t {
            Tok::Name(n) => r.declare(n.clone()),
            Tok::Sym(s) if s == "..." => r.declare("arg".into()),
            Tok::Sym(s) if s == ")" => break,
            _ => {}
        }
    }
    j
}

/// Lua 5.1 lets one function hold 200 locals at once and reach 60
/// variables of the functions around it (upvalues); past either,
/// FUNCTION LOAD (or the EVALSHA script) fails on every server. The
/// library's main chunk holds the prelude's names, the helpers' tables
/// and the call's state; a transition reaches the names and tables it
/// uses. Every text keeps a quarter of each limit free, for the next
/// features: a name, a helper's table, a field a script reads.
#[test]
fn every_function_keeps_a_quarter_of_luas_limits_free() {
    const LOCALS: usize = 200;
    const UPVALUES: usize = 60;
    let lib = super::library();
    let texts = std::iter::once(("the library", lib.source.as_str()))
        .chain(lib.functions.iter().map(|e| (e.name, e.eval.as_str())));
    for (text, source) in texts {
        let functions = functions(source);
        let main = &functions[0];
        let locals = functions.iter().max_by_key(|f| f.locals).unwrap();
        let upvalues = functions.iter().max_by_key(|f| f.upvalues).unwrap();
        if text == "the library" {
            println!(
                "the library's main chunk: {} locals of {LOCALS}; most locals: {} ({}); \
                 most upvalues: {} ({} of {UPVALUES})",
                main.locals, locals.name, locals.locals, upvalues.name, upvalues.upvalues
            );
        }
        for f in &functions {
            assert!(
                f.locals <= LOCALS * 3 / 4,
                "{text}: {} (line {}) holds {} locals of Lua's {LOCALS}",
                f.name,
                f.line,
                f.locals
            );
            assert!(
                f.upvalues <= UPVALUES * 3 / 4,
                "{text}: {} (line {}) reaches {} upvalues of Lua's {UPVALUES}",
                f.name,
                f.line,
                f.upvalues
            );
        }
    }
}

/// The reading of scopes counts what Lua's compiler counts.
#[test]
fn limits_count_locals_and_upvalues_as_lua_does() {
    let text = "#!lua name=x\n\
        local a, b = 1, 2 -- two\n\
        local function f(x, ...) return a + x end\n\
        local t = { a = 1, b = function() return b, t end, [[s]] }\n\
        for i = 1, 2 do local c = i end\n\
        do local d = function() local e = 1 return function() return e + a end end end\n";
    let f = functions(text);
    let figures: Vec<_> = f
        .iter()
        .map(|f| (f.name.as_str(), f.locals, f.upvalues))
        .collect();
    assert_eq!(
        figures,
        [
            ("the main chunk", 9, 0),
            ("f", 2, 1),
            // `t` is not yet a local inside its own constructor.
            ("function", 0, 1),
            ("function", 0, 2),
            ("function", 1, 1),
        ]
    );
}

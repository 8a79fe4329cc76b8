//! The house rules of `src/`, checked on the source itself:
//! - no two files import each other, directly or around a loop;
//! - `wal`, `storage::chunk` and `storage::block` import only the leaves (`encoding`, `reuse`,
//!   the `histogram` model, and the test crash points of `crash`);
//! - `protocol` imports only the leaves `encoding`, `reuse`, the `histogram` model and `proto`;
//! - storage has two doors: nothing outside `storage` names the head (its
//!   shards, slots, locks, aliases) or the WAL's use by the head; ingest
//!   imports neither `wal` nor the head; forward imports neither `ingest`
//!   nor the head; `api` and `promql` reach storage through `Db`,
//!   `Appender` and `Querier` and the values they take and give;
//! - no `impl Head` outside `storage/head.rs` and `storage/head/`.
//!
//! A file's dependencies are the modules named by its `use` paths and by
//! `crate::…`/`super::…` paths in its code (comments and `#[cfg(test)]`
//! modules left out). A parent's `pub use` of its children is a facade,
//! not a dependency; its own code naming a child is one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use regex::Regex;

type Graph = BTreeMap<String, BTreeSet<String>>;

fn modules(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path
                    .strip_prefix(root)
                    .expect("under src")
                    .with_extension("");
                let name = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("::");
                let text = std::fs::read_to_string(&path).expect("read file");
                out.insert(name, text);
            }
        }
    }
    out
}

/// The code of a file without comments and test modules.
fn code(text: &str) -> String {
    let cut = Regex::new(r"#\[cfg\(test\)\]\s*mod \w+").expect("regex");
    let text = cut.split(text).next().unwrap_or_default();
    let comments = Regex::new(r"//[^\n]*").expect("regex");
    comments.replace_all(text, "").into_owned()
}

/// The module file a path inside `from` refers to, if any.
fn resolve(mods: &BTreeSet<String>, from: &str, path: &str) -> Option<String> {
    let mut parts: Vec<&str> = path.split("::").collect();
    let mut base: Vec<&str> = match parts.first() {
        Some(&"crate") => {
            parts.remove(0);
            Vec::new()
        }
        Some(&"super") | Some(&"self") => {
            let mut base: Vec<&str> = from.split("::").collect();
            while let Some(&p) = parts.first() {
                match p {
                    "super" => {
                        base.pop();
                    }
                    "self" => {}
                    _ => break,
                }
                parts.remove(0);
            }
            base
        }
        _ => return None,
    };
    base.extend(parts);
    (1..=base.len())
        .rev()
        .map(|n| base[..n].join("::"))
        .find(|m| mods.contains(m))
}

fn graph(files: &BTreeMap<String, String>) -> Graph {
    let mods: BTreeSet<String> = files.keys().cloned().collect();
    let uses =
        Regex::new(r"\buse\s+((?:crate|super|self)(?:::\w+)*)(?:::\{([^;]*)\})?").expect("regex");
    let paths = Regex::new(r"\b((?:crate|super)(?:::\w+)+)").expect("regex");
    let facade =
        Regex::new(r"pub(?:\([^)]*\))? use [^;]*;|(?:pub(?:\([^)]*\))? )?mod \w+;").expect("regex");
    let mut g = Graph::new();
    for (m, text) in files {
        let body = code(text);
        let mut deps = BTreeSet::new();
        let mut add = |path: &str| {
            if let Some(r) = resolve(&mods, m, path) {
                if &r != m {
                    deps.insert(r);
                }
            }
        };
        for u in uses.captures_iter(&body) {
            let base = &u[1];
            add(base);
            if let Some(items) = u.get(2) {
                for item in items.as_str().split(',') {
                    let item = item.split(" as ").next().unwrap_or("").trim();
                    let item = item.split("::{").next().unwrap_or("");
                    if !item.is_empty() && item != "self" {
                        add(&format!("{base}::{item}"));
                    }
                }
            }
        }
        for p in paths.captures_iter(&body) {
            add(&p[1]);
        }
        // A parent's own code naming a child module.
        let own = facade.replace_all(&body, "");
        for child in mods
            .iter()
            .filter(|k| k.rsplit_once("::").is_some_and(|(p, _)| p == m))
        {
            let name = child.rsplit("::").next().unwrap_or_default();
            let named = Regex::new(&format!(r"(?:^|[^\w:]){name}::")).expect("regex");
            if named.is_match(&own) {
                deps.insert(child.clone());
            }
        }
        g.insert(m.clone(), deps);
    }
    g
}

/// Strongly connected components with more than one file (Tarjan).
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    struct State<'g> {
        g: &'g Graph,
        next: usize,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on: BTreeSet<&'g str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on.insert(v);
        for w in &s.g[v] {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        g,
        next: 0,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn src_graph() -> Graph {
    graph(&modules(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src")))
}

#[test]
fn no_file_imports_itself_around_a_loop() {
    let g = src_graph();
    assert!(g.len() > 50, "found only {} files under src/", g.len());
    let found = cycles(&g);
    let shown: Vec<String> = found
        .iter()
        .map(|c| {
            let edges: Vec<String> = c
                .iter()
                .map(|m| {
                    let inside: Vec<&str> = g[m]
                        .iter()
                        .filter(|d| c.contains(d))
                        .map(String::as_str)
                        .collect();
                    format!("{m} -> {}", inside.join(", "))
                })
                .collect();
            edges.join("; ")
        })
        .collect();
    assert!(found.is_empty(), "import cycles in src/: {shown:#?}");
}

#[test]
fn the_lower_layers_import_only_leaves() {
    let g = src_graph();
    // `storage::starts` is a codec of its own (start-time runs), on `encoding` alone;
    // `heap` (the allocator's settings, the mapping of block files) imports nothing.
    let leaves = [
        "encoding",
        "reuse",
        "histogram",
        "crash",
        "storage::starts",
        "heap",
    ];
    for (m, deps) in &g {
        let Some(layer) = ["wal", "storage::chunk", "storage::block"]
            .into_iter()
            .find(|l| m == l || m.starts_with(&format!("{l}::")))
        else {
            continue;
        };
        for d in deps {
            let inside = d == layer || d.starts_with(&format!("{layer}::"));
            assert!(
                inside || leaves.contains(&d.as_str()),
                "{m} imports {d}: {layer} may import only {leaves:?}"
            );
        }
    }
}

/// Whether module `m` is `layer` or inside it.
fn within(m: &str, layer: &str) -> bool {
    m == layer || m.starts_with(&format!("{layer}::"))
}

/// Every import of a module in one of `from` that lands in one of `to`.
fn imports_between(g: &Graph, from: &[&str], to: &[&str]) -> Vec<String> {
    g.iter()
        .filter(|(m, _)| from.iter().any(|f| within(m, f)))
        .flat_map(|(m, deps)| {
            deps.iter()
                .filter(|d| to.iter().any(|t| within(d, t)))
                .map(move |d| format!("{m} -> {d}"))
        })
        .collect()
}

#[test]
fn protocol_imports_only_leaves() {
    let g = src_graph();
    let leaves = ["encoding", "reuse", "histogram", "proto"];
    assert!(
        g.keys().any(|m| within(m, "protocol")),
        "no protocol module"
    );
    for (m, deps) in g.iter().filter(|(m, _)| within(m, "protocol")) {
        for d in deps {
            assert!(
                within(d, "protocol") || leaves.iter().any(|l| within(d, l)),
                "{m} imports {d}: protocol may import only {leaves:?}"
            );
        }
    }
}

#[test]
fn nothing_outside_storage_names_the_head() {
    let g = src_graph();
    let outside: Vec<&str> = g
        .keys()
        .map(String::as_str)
        .filter(|m| !within(m, "storage"))
        .collect();
    let found = imports_between(&g, &outside, &["storage::head"]);
    assert!(
        found.is_empty(),
        "the head named outside storage: {found:#?}"
    );
}

#[test]
fn ingest_writes_through_the_appender_not_the_wal() {
    let found = imports_between(&src_graph(), &["ingest"], &["wal", "storage::head"]);
    assert!(
        found.is_empty(),
        "ingest reaches past the Appender: {found:#?}"
    );
}

#[test]
fn forward_imports_neither_ingest_nor_the_head() {
    let found = imports_between(&src_graph(), &["forward"], &["ingest", "storage::head"]);
    assert!(found.is_empty(), "forward reaches into: {found:#?}");
}

/// `api` and `promql` use storage's doors and the values that pass
/// through them: labels, matchers, selected series, metadata and
/// exemplars, and the read's stop condition (the root module).
#[test]
fn api_and_promql_reach_storage_through_its_doors() {
    let g = src_graph();
    let doors = [
        "storage::db",
        "storage::appender",
        "storage::querier",
        "storage::labels",
        "storage::index",
        "storage::selected",
        "storage::metadata",
        "storage::exemplars",
    ];
    for (m, deps) in g
        .iter()
        .filter(|(m, _)| within(m, "api") || within(m, "promql"))
    {
        for d in deps.iter().filter(|d| within(d, "storage")) {
            assert!(
                d == "storage" || doors.contains(&d.as_str()),
                "{m} imports {d}: api and promql reach storage only through {doors:?}"
            );
        }
    }
}

/// The head's methods live in the head's own files.
#[test]
fn no_impl_head_outside_the_head() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let impl_head = Regex::new(r"\bimpl(<[^>]*>)?\s+Head\b").expect("regex");
    let found: Vec<String> = modules(&root)
        .into_iter()
        .filter(|(m, text)| !within(m, "storage::head") && impl_head.is_match(&code(text)))
        .map(|(m, _)| m)
        .collect();
    assert!(
        found.is_empty(),
        "impl Head outside storage/head: {found:?}"
    );
}

#[test]
fn the_checker_sees_a_cycle_and_a_reach_up() {
    let files: BTreeMap<String, String> = [
        ("a", "use crate::b::X;\n"),
        ("b", "pub struct X;\nfn f() { crate::a::g(); }\n"),
        (
            "c",
            "// use crate::a;\n#[cfg(test)]\nmod tests { use crate::a; }\n",
        ),
        ("p", "mod q;\npub use q::Y;\n"),
        ("p::q", "use super::Z;\n"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let g = graph(&files);
    assert_eq!(cycles(&g), vec![vec!["a".to_owned(), "b".to_owned()]]);
    assert!(g["c"].is_empty(), "comments and tests are not imports");
    assert!(g["p"].is_empty(), "a facade is not a dependency");
    assert_eq!(g["p::q"], BTreeSet::from(["p".to_owned()]));
    assert_eq!(
        imports_between(&g, &["a"], &["b"]),
        vec!["a -> b".to_owned()],
        "an import across layers is found"
    );
    assert!(imports_between(&g, &["c"], &["a"]).is_empty());
}

/// `unsafe` is denied in the crate and allowed in one place, `src/heap.rs`:
/// the FFI calls that tune the allocator and the mapping of block files.
#[test]
fn unsafe_code_is_confined_to_the_heap_module() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for (m, text) in modules(&root) {
        let code: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        if code.contains("unsafe") && m != "heap" {
            found.push(m);
        }
    }
    assert!(found.is_empty(), "unsafe outside src/heap.rs: {found:?}");
    let heap = std::fs::read_to_string(root.join("heap.rs")).expect("heap.rs");
    assert!(
        heap.contains("// SAFETY:"),
        "the unsafe calls say why they are sound"
    );
}

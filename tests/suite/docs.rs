//! The docs: the README and the book (docs/, mdBook's layout, English in
//! docs/ and Chinese in docs/zh-CN/) in step across the two languages (the
//! same pages, sections in the same order and depth, the same commands and
//! code, to the byte), every relative link and anchor resolving, and the
//! figures and tables they state equal to the code's.

use serde_json::Value;

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{}/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// A line of code without its shell or TOML comment (a `#` at the start or
/// after white space, outside quotes): the Chinese pages say their
/// comments in Chinese.
fn uncommented(line: &str) -> &str {
    let mut quote = None;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == '#' && prev.is_whitespace() => return line[..i].trim_end(),
            None => {}
        }
        prev = c;
    }
    line.trim_end()
}

/// The comments of a code block (shell and TOML).
fn comments(block: &str) -> Vec<&str> {
    block
        .lines()
        .skip(1)
        .filter_map(|l| l.get(uncommented(l).len()..))
        .map(str::trim)
        .filter(|c| c.starts_with('#'))
        .collect()
}

/// The heading levels outside code, and the code blocks.
fn shape(text: &str) -> (Vec<usize>, Vec<String>) {
    let (mut heads, mut blocks) = (Vec::new(), Vec::new());
    let mut block: Option<String> = None;
    for line in text.lines() {
        if line.starts_with("```") {
            match block.take() {
                Some(b) => blocks.push(b),
                None => block = Some(format!("{line}\n")),
            }
            continue;
        }
        match &mut block {
            Some(b) => {
                b.push_str(line);
                b.push('\n');
            }
            None if line.starts_with('#') => {
                heads.push(line.chars().take_while(|c| *c == '#').count())
            }
            None => {}
        }
    }
    (heads, blocks)
}

/// The same sections in the same order and depth, and the same code (shell
/// and TOML comments may be translated); each links to the other (`to_zh`,
/// `to_en`: the link targets, as written).
fn same_shape(en_name: &str, zh_name: &str, to_zh: &str, to_en: &str) {
    let (en, zh) = (read(en_name), read(zh_name));
    let (en_heads, en_code) = shape(&en);
    let (zh_heads, zh_code) = shape(&zh);
    assert_eq!(en_heads, zh_heads, "{zh_name}: sections differ");
    assert_eq!(
        en_code.len(),
        zh_code.len(),
        "{zh_name}: code blocks differ in number"
    );
    let code = |b: &str| -> Vec<String> {
        let fence = b.lines().next().unwrap_or_default();
        if !(fence.contains("sh") || fence.contains("toml")) {
            return b.lines().map(str::to_owned).collect();
        }
        b.lines()
            .map(|l| uncommented(l).to_owned())
            .filter(|l| !l.is_empty())
            .collect()
    };
    for (i, (e, z)) in en_code.iter().zip(&zh_code).enumerate() {
        assert_eq!(code(e), code(z), "{zh_name}: code block {i} differs");
    }
    assert!(
        en.contains(&format!("]({to_zh})")) && zh.contains(&format!("]({to_en})")),
        "{en_name} and {zh_name} do not link to each other"
    );
}

#[test]
fn the_chinese_readme_has_the_same_sections_and_commands() {
    same_shape(
        "README.md",
        "README.zh-CN.md",
        "README.zh-CN.md",
        "README.md",
    );
}

/// The README is a front door, not the manual.
#[test]
fn each_readme_fits_in_300_lines() {
    for name in ["README.md", "README.zh-CN.md"] {
        let lines = read(name).lines().count();
        assert!(lines <= 300, "{name} has {lines} lines");
    }
}

/// The link targets of a SUMMARY.md's list, in order.
fn summary(name: &str) -> Vec<String> {
    read(name)
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("- ["))
        .map(|l| {
            let at = l.find("](").expect("a summary entry is a link") + 2;
            let end = l[at..].find(')').expect("a closed link") + at;
            l[at..end].to_owned()
        })
        .collect()
}

/// Pages only in English: the Chinese book has a page of the same name
/// that says so and links to the English one.
const ENGLISH_ONLY: [&str; 1] = ["DESIGN.md"];

/// The English book and the Chinese book list the same pages in the same
/// order and parts, every page of either is in its book, and each Chinese
/// page has the English page's shape.
#[test]
fn the_books_have_the_same_pages_in_the_same_shape() {
    let (en, zh) = (summary("docs/SUMMARY.md"), summary("docs/zh-CN/SUMMARY.md"));
    assert_eq!(en, zh, "docs/zh-CN/SUMMARY.md lists other pages");
    let parts = |name: &str| shape(&read(name)).0;
    assert_eq!(parts("docs/SUMMARY.md"), parts("docs/zh-CN/SUMMARY.md"));
    assert!(en.len() > 20, "{en:?}");
    for dir in ["docs", "docs/zh-CN"] {
        let unlisted: Vec<String> =
            std::fs::read_dir(format!("{}/{dir}", env!("CARGO_MANIFEST_DIR")))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| n.ends_with(".md") && n != "SUMMARY.md" && n != "README.md")
                .filter(|n| !en.contains(n))
                .collect();
        assert!(
            unlisted.is_empty(),
            "{dir}: pages not in SUMMARY.md: {unlisted:?}"
        );
    }
    for page in en.iter().map(String::as_str).chain(["README.md"]) {
        let (en_name, zh_name) = (format!("docs/{page}"), format!("docs/zh-CN/{page}"));
        if ENGLISH_ONLY.contains(&page) {
            assert!(
                read(&zh_name).contains(&format!("](../{page})")),
                "{zh_name} does not link to the English page"
            );
            continue;
        }
        same_shape(
            &en_name,
            &zh_name,
            &format!("zh-CN/{page}"),
            &format!("../{page}"),
        );
    }
}

/// Every page with Rust code is compiled as doc tests, as the README is
/// (src/lib.rs includes it).
#[test]
fn every_page_with_rust_code_is_a_doc_test() {
    let lib = read("src/lib.rs");
    for page in summary("docs/SUMMARY.md") {
        if read(&format!("docs/{page}")).contains("```rust") {
            assert!(
                lib.contains(&format!("include_str!(\"../docs/{page}\")")),
                "src/lib.rs does not include docs/{page} as doc tests"
            );
        }
    }
    assert!(lib.contains("include_str!(\"../README.md\")"));
}

/// GitHub's anchors of a page's headings: lower case, inline code and
/// links as their text, every character but letters, digits, `_`, `-` and
/// spaces dropped, spaces made `-`; a repeated anchor gets `-1`, `-2`, ...
fn anchors(text: &str) -> Vec<String> {
    let mut seen = std::collections::HashMap::<String, usize>::new();
    let mut fence = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fence = !fence;
        }
        if fence || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let mut plain = String::new();
        let mut rest = title;
        // A link in a heading counts by its text.
        while let Some(open) = rest.find('[') {
            plain.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            match (after.find("]("), after.find(')')) {
                (Some(close), Some(end)) if close < end => {
                    plain.push_str(&after[..close]);
                    rest = &after[end + 1..];
                }
                _ => {
                    plain.push('[');
                    rest = after;
                }
            }
        }
        plain.push_str(rest);
        let slug: String = plain
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_default();
        out.push(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

/// The relative link targets of a markdown text, outside code: inline
/// links and images (`[text](target)`) and reference definitions.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fence = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fence = !fence;
        }
        if fence {
            continue;
        }
        // Inline code is no link.
        let prose: String = line
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, s)| s)
            .collect::<Vec<_>>()
            .join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let target = &rest[at + 2..];
            let end = target.find([')', ' ']).unwrap_or(target.len());
            out.push(target[..end].to_owned());
            rest = &target[end..];
        }
        if let Some((_, target)) = prose.strip_prefix('[').and_then(|l| l.split_once("]: ")) {
            out.push(target.trim().to_owned());
        }
    }
    out.retain(|t| !t.contains("://") && !t.starts_with("mailto:"));
    out
}

/// The markdown files of the README and the book.
fn markdown_files() -> Vec<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md"), root.join("README.zh-CN.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                // Not mdBook's output, where one was built.
                if path.file_name().unwrap() != "book" {
                    dirs.push(path);
                }
            } else if path.extension().is_some_and(|x| x == "md") {
                files.push(path);
            }
        }
    }
    files
}

/// Every relative link of the README and the book names a file that
/// exists, and its `#anchor` a heading of that page (GitHub's rules).
#[test]
fn every_link_and_anchor_of_the_docs_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for target in links(&text) {
            checked += 1;
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let to = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !to.exists() {
                broken.push(format!("{}: {target}: no such file", file.display()));
                continue;
            }
            if !anchor.is_empty() {
                let page = std::fs::read_to_string(&to).unwrap_or_default();
                if !anchors(&page).iter().any(|a| a == anchor) {
                    broken.push(format!("{}: {target}: no such heading", file.display()));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "{} broken links:\n{}",
        broken.len(),
        broken.join("\n")
    );
    assert!(checked > 100, "only {checked} links found");
}

/// The anchor rules, on headings whose anchors GitHub shows.
#[test]
fn anchors_follow_githubs_rules() {
    let text = "# The native API (`/v1`)\n## 示例：30 分钟后关闭未支付订单\n## Tests\n\
                ```sh\n# not a heading\n```\n## Tests\n## A [link](x.md) here\n";
    assert_eq!(
        anchors(text),
        [
            "the-native-api-v1",
            "示例30-分钟后关闭未支付订单",
            "tests",
            "tests-1",
            "a-link-here"
        ]
    );
}

/// The native API's table (both languages) lists every route the server has.
#[test]
fn the_api_page_lists_every_native_route() {
    for name in ["docs/http-api.md", "docs/zh-CN/http-api.md"] {
        let text = read(name);
        let missing: Vec<String> = delayq::http::v1::ROUTES
            .iter()
            .map(|r| format!("`{} {}", r.method.to_uppercase(), r.path))
            .filter(|row| !text.contains(&format!("{row}`")) && !text.contains(&format!("{row}?")))
            .collect();
        assert!(missing.is_empty(), "{name} lacks {missing:?}");
    }
}

/// Unix ms of an RFC 3339 time the docs quote.
fn ms(at: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(at)
        .unwrap()
        .timestamp_millis()
}

/// The renewal examples move a reminder to the same date a year on: the
/// tag's shift (HTTP and CLI) is the length from the first reminder's due
/// time to the date its own reschedule names, 29 February included.
#[test]
fn the_renewal_shift_lands_on_the_same_date_a_year_later() {
    for name in ["docs", "docs/zh-CN"] {
        // The reminders are pushed on the webhooks page, moved on the tags page.
        let text = read(&format!("{name}/webhooks.md")) + &read(&format!("{name}/tags.md"));
        let after = |key: &str| -> String {
            let at = text
                .find(key)
                .unwrap_or_else(|| panic!("{name} lacks {key}"));
            text[at + key.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || ":-".contains(*c))
                .collect()
        };
        let shift_ms: i64 = after(r#"reschedule -d '{"shift_ms":"#).parse().unwrap();
        let cli_days: i64 = after("delayq tags reschedule member:77 --shift ")
            .trim_end_matches('d')
            .parse()
            .unwrap();
        let first = after(r#""id":"member-77-expiry-15d","topic":"member-reminder","due_at":""#);
        let moved = after(r#"reschedule -d '{"due_at":""#);
        assert_eq!(
            ms(&first) + shift_ms,
            ms(&moved),
            "{name}: a shift of {shift_ms} ms moves {first} elsewhere than {moved}"
        );
        assert_eq!(cli_days * 86_400_000, shift_ms, "{name}: the CLI's shift");
    }
}

/// The limits table gives the ttr and retry limits the code has (the
/// compatible API's ttr is its own, 1 to 86400 s).
#[test]
fn the_limits_page_states_the_ttr_and_retry_limits_the_code_has() {
    use delayq::duration::in_words;
    let ttr = delayq::job::Limits::default().max_ttr;
    let interval = delayq::retry::MAX_INTERVAL;
    let en = read("docs/limits.md");
    for said in [
        format!(
            "`ttr_ms` 1 ms to {} ({} ms)",
            in_words(ttr),
            ttr.as_millis()
        ),
        "`ttr` 1 to 86400 s".to_owned(),
        format!(
            "each up to {} ({} ms)",
            in_words(interval),
            interval.as_millis()
        ),
    ] {
        assert!(en.contains(&said), "docs/limits.md does not say {said:?}");
    }
    let zh = read("docs/zh-CN/limits.md");
    for ms in [ttr.as_millis(), interval.as_millis()] {
        assert!(
            zh.contains(&format!("（{ms} ms）")),
            "docs/zh-CN/limits.md lacks {ms} ms"
        );
    }
}

/// The Chinese switching steps speak Chinese, their comments included (the
/// commands are the English page's).
#[test]
fn the_chinese_switch_steps_are_in_chinese() {
    let zh = read("docs/zh-CN/ouqiang.md");
    let at = zh
        .find("## 从 ouqiang/delay-queue 迁移")
        .expect("the section");
    let (_, blocks) = shape(&zh[at..]);
    let english: Vec<&str> = comments(&blocks[0])
        .into_iter()
        .filter(|c| !c.chars().any(|ch| ('\u{4e00}'..='\u{9fff}').contains(&ch)))
        .collect();
    assert!(english.is_empty(), "comments left in English: {english:?}");
}

/// `npm ci` refuses a lock file that lacks any package a locked package
/// names (optional ones included): the BullMQ side of the benchmark must
/// install from a clean checkout.
#[test]
fn the_bullmq_lock_file_is_in_step_with_package_json() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/bullmq");
    let read = |f: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(format!("{dir}/{f}")).unwrap()).unwrap()
    };
    let (package, lock) = (read("package.json"), read("package-lock.json"));
    let packages = lock["packages"].as_object().unwrap();
    assert_eq!(packages[""]["dependencies"], package["dependencies"]);
    for (path, p) in packages {
        for field in ["dependencies", "optionalDependencies"] {
            for name in p[field].as_object().into_iter().flatten().map(|(n, _)| n) {
                let nested = format!("{path}/node_modules/{name}");
                let top = format!("node_modules/{name}");
                assert!(
                    packages.contains_key(&nested) || packages.contains_key(&top),
                    "{path} needs {name}, which the lock file lacks"
                );
            }
        }
    }
}

/// The default column of the `delayq serve` flag table, by flag.
fn flag_defaults(text: &str) -> std::collections::HashMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let flag = cells.get(1)?.strip_prefix("`--")?.strip_suffix('`')?;
            Some((flag.to_owned(), (*cells.get(3)?).to_owned()))
        })
        .collect()
}

/// The configuration page's flag table (both languages) gives the defaults
/// the code has, and the config file's reference the default of
/// `events_kept`.
#[test]
fn the_flag_tables_defaults_are_the_codes() {
    use delayq::defaults as d;
    let code = |v: &dyn std::fmt::Display| format!("`{v}`");
    let want = [
        ("listen", code(&d::LISTEN)),
        ("prefix", code(&d::PREFIX)),
        ("data-dir", code(&d::DATA_DIR)),
        ("redis-timeout", code(&d::REDIS_TIMEOUT.text)),
        ("pop-timeout", code(&d::POP_TIMEOUT.text)),
        ("replica-acks", code(&d::REPLICA_ACKS)),
        ("max-connections", code(&d::MAX_CONNECTIONS)),
        ("dead-max", code(&d::DEAD_MAX)),
        ("dead-max-age", code(&d::DEAD_MAX_AGE.text)),
        ("events-kept", code(&d::EVENTS_KEPT)),
    ];
    let en = read("docs/configuration.md");
    for name in ["docs/configuration.md", "docs/zh-CN/configuration.md"] {
        let table = flag_defaults(&read(name));
        for (flag, default) in &want {
            assert_eq!(
                table.get(*flag),
                Some(default),
                "{name}: --{flag}'s default"
            );
        }
    }
    let table = flag_defaults(&en);
    assert_eq!(
        table["partitions"],
        format!(
            "`{}`; `{}` on a cluster",
            d::PARTITIONS,
            d::CLUSTER_PARTITIONS
        )
    );
    assert_eq!(
        flag_defaults(&read("docs/zh-CN/configuration.md"))["partitions"],
        format!("`{}`；集群上 `{}`", d::PARTITIONS, d::CLUSTER_PARTITIONS)
    );
    assert!(en.contains(&format!(
        "split the queue into N partitions (1 to {})",
        d::MAX_PARTITIONS
    )));
    assert!(en.contains(&format!(
        "events each partition keeps, about (1 to {})",
        d::MAX_EVENTS_KEPT
    )));
    assert!(en.contains(&format!(
        "events_kept = {0}        # events kept per partition, about (default {0})",
        d::EVENTS_KEPT
    )));
    assert!(en.contains(&format!(
        "key prefix (`[A-Za-z0-9_.-]`, up to {})",
        d::MAX_PREFIX_LEN
    )));
}

/// The README's `curl` blocks (the quick start's and the native API's push,
/// pop and finish) run as written against a server, each reply a success:
/// the pop hands over the job pushed, and the finish leaves none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_push_pop_finish_run_as_written() {
    use crate::common::{queue, shell_words, RedisServer, TestServer};
    let redis = RedisServer::start();
    let server = TestServer::start(queue(&redis), Default::default()).await;
    let http = reqwest::Client::new();
    let (_, blocks) = shape(&read("README.md"));
    let runs: Vec<&String> = blocks
        .iter()
        .filter(|b| {
            b.lines()
                .skip(1)
                .all(|l| l.starts_with("curl -s localhost:9277/"))
        })
        .collect();
    assert_eq!(runs.len(), 2, "the quick start's block and the native one");
    for block in runs {
        let mut token: Option<String> = None;
        for line in block.lines().skip(1) {
            let words = shell_words(line);
            let mut method = "GET";
            let (mut url, mut body) = (None, None);
            let mut w = words[2..].iter();
            while let Some(word) = w.next() {
                match word.as_str() {
                    "-X" => {
                        method = if w.next().unwrap() == "DELETE" {
                            "DELETE"
                        } else {
                            "POST"
                        }
                    }
                    "-d" => {
                        body = w.next().cloned();
                        if method == "GET" {
                            method = "POST";
                        }
                    }
                    u => url = Some(u.replace("localhost:9277", &server.base)),
                }
            }
            let mut body = body.unwrap_or_default();
            if let Some(t) = &token {
                body = body.replace("<token from pop>", t.as_str());
            }
            let req = match method {
                "POST" => http.post(url.unwrap()).body(body),
                "DELETE" => http.delete(url.unwrap()),
                _ => http.get(url.unwrap()),
            };
            let resp = req.send().await.unwrap();
            let status = resp.status();
            let text = resp.text().await.unwrap();
            assert!(status.is_success(), "{line}: {status} {text}");
            if text.is_empty() {
                continue;
            }
            let reply: Value = serde_json::from_str(&text).unwrap();
            if let Some(code) = reply.get("code") {
                assert_eq!(code, 0, "{line}: {text}");
            }
            if line.contains("/pop") {
                let job = reply["data"].as_object().or(reply["jobs"][0].as_object());
                let job = job.unwrap_or_else(|| panic!("{line}: no job in {text}"));
                assert!(job["id"].is_string(), "{text}");
                token = job.get("token").and_then(Value::as_str).map(str::to_owned);
            }
        }
    }
    // Both jobs were finished: none is left to hand out.
    let q = &server.queue;
    for id in ["15702398321", "order-1001"] {
        assert!(q.get(id).await.unwrap().is_none(), "{id} is still there");
    }
    server.stop().await;
}

/// No `<word>` outside code in the README and the book: GitHub drops what
/// looks like an HTML tag it does not know (and mdBook warns), so a
/// placeholder such as <last id> would vanish from the page.
#[test]
fn no_placeholder_in_angle_brackets_outside_code() {
    let mut found = Vec::new();
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut fence = false;
        let prose: Vec<&str> = text
            .lines()
            .filter(|l| {
                if l.starts_with("```") {
                    fence = !fence;
                    return false;
                }
                !fence
            })
            .collect();
        let prose = prose.join("\n");
        // Odd pieces between backticks are code spans (they may wrap).
        for piece in prose.split('`').step_by(2) {
            let mut rest = piece;
            while let Some(at) = rest.find('<') {
                rest = &rest[at + 1..];
                let Some(end) = rest.find(['>', '\n']) else {
                    break;
                };
                let inside = &rest[..end];
                let tag_like = rest[end..].starts_with('>')
                    && inside.starts_with(|c: char| c.is_ascii_alphabetic())
                    && !inside.starts_with("http")
                    && inside != "br";
                if tag_like {
                    found.push(format!("{}: <{inside}>", file.display()));
                }
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

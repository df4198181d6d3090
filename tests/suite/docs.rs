//! The README in Chinese stays in step with the English one: the same
//! sections, in the same order and depth, and the same commands and code,
//! to the byte.

use serde_json::Value;

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{}/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// A line of code without its shell or TOML comment (a `#` at the start or
/// after white space, outside quotes): the Chinese README says its
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
/// and TOML comments may be translated); each links to the other.
fn same_shape(en_name: &str, zh_name: &str) {
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
    let file = |name: &str| name.rsplit('/').next().unwrap().to_owned();
    assert!(
        en.contains(&format!("({})", file(zh_name)))
            && zh.contains(&format!("({})", file(en_name))),
        "{en_name} and {zh_name} do not link to each other"
    );
}

#[test]
fn the_chinese_readme_has_the_same_sections_and_commands() {
    same_shape("README.md", "README.zh-CN.md");
}

/// The managed services' page, likewise; the README links to both.
#[test]
fn the_chinese_services_page_has_the_same_sections_and_commands() {
    same_shape("docs/services.md", "docs/services.zh-CN.md");
    assert!(read("README.md").contains("(docs/services.md)"));
    assert!(read("README.zh-CN.md").contains("(docs/services.zh-CN.md)"));
}

/// README's `/v1` table (both languages) lists every route the server has.
#[test]
fn the_readmes_list_every_native_route() {
    for name in ["README.md", "README.zh-CN.md"] {
        let text = read(name);
        let missing: Vec<String> = delayq::http::v1::ROUTES
            .iter()
            .map(|r| format!("`{} {}", r.method.to_uppercase(), r.path))
            .filter(|row| !text.contains(&format!("{row}`")) && !text.contains(&format!("{row}?")))
            .collect();
        assert!(missing.is_empty(), "{name} lacks {missing:?}");
    }
}

/// Unix ms of an RFC 3339 time the README quotes.
fn ms(at: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(at)
        .unwrap()
        .timestamp_millis()
}

/// The renewal examples move a reminder to the same date a year on: the
/// tag's shift (HTTP and CLI) is the length from the first reminder's due
/// time to the date its own reschedule names, 29 February included.
#[test]
fn the_readmes_renewal_shift_lands_on_the_same_date_a_year_later() {
    for name in ["README.md", "README.zh-CN.md"] {
        let text = read(name);
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
fn the_readmes_state_the_ttr_and_retry_limits_the_code_has() {
    use delayq::duration::in_words;
    let ttr = delayq::job::Limits::default().max_ttr;
    let interval = delayq::retry::MAX_INTERVAL;
    let en = read("README.md");
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
        assert!(en.contains(&said), "README.md does not say {said:?}");
    }
    let zh = read("README.zh-CN.md");
    for ms in [ttr.as_millis(), interval.as_millis()] {
        assert!(
            zh.contains(&format!("（{ms} ms）")),
            "README.zh-CN.md lacks {ms} ms"
        );
    }
}

/// The Chinese README's switching steps speak Chinese, their comments
/// included (the commands are the English README's).
#[test]
fn the_chinese_readmes_switch_steps_are_in_chinese() {
    let zh = read("README.zh-CN.md");
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

/// The default column of README's `delayq serve` flag table, by flag.
fn flag_defaults(text: &str) -> std::collections::HashMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let flag = cells.get(1)?.strip_prefix("`--")?.strip_suffix('`')?;
            Some((flag.to_owned(), (*cells.get(3)?).to_owned()))
        })
        .collect()
}

/// README's flag table (both languages) gives the defaults the code has,
/// and the config file's reference the default of `events_kept`.
#[test]
fn the_readmes_flag_defaults_are_the_codes() {
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
    let en = read("README.md");
    for name in ["README.md", "README.zh-CN.md"] {
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
        flag_defaults(&read("README.zh-CN.md"))["partitions"],
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

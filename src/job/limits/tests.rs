use super::*;

fn job() -> NewJob {
    NewJob {
        id: "1".into(),
        topic: "order".into(),
        delay: Duration::from_secs(1),
        ..NewJob::default()
    }
}

#[test]
fn tags_are_bounded_and_a_repeat_counts_once() {
    let tags = |n: usize| (0..n).map(|i| format!("t{i}")).collect::<Vec<_>>();
    assert!(check_tags(&tags(8)).is_ok());
    let mut repeated = tags(8);
    repeated.push("t0".into());
    assert!(check_tags(&repeated).is_ok());
    for bad in [
        tags(9),
        vec![String::new()],
        vec!["x".repeat(129)],
        vec!["a\nb".into()],
    ] {
        let e = check_tags(&bad).unwrap_err();
        assert!(e.starts_with("tags:"), "{e}");
    }
    assert!(check_tags(&["x".repeat(128)]).is_ok());
}

#[test]
fn limits_name_the_problem() {
    let l = Limits::default();
    assert!(l.check_job(&job()).is_ok());
    let e = l
        .check_job(&NewJob {
            id: "x".repeat(257),
            ..job()
        })
        .unwrap_err();
    assert!(e.contains("257 bytes"), "{e}");
    let e = l
        .check_job(&NewJob {
            topic: "a,b".into(),
            ..job()
        })
        .unwrap_err();
    assert!(e.contains("comma"), "{e}");
    let e = l
        .check_job(&NewJob {
            ttr: Duration::ZERO,
            ..job()
        })
        .unwrap_err();
    assert!(e.contains("ttr"), "{e}");
    let e = l
        .check_job(&NewJob {
            id: "recurring/{daily}/2026-11-23T01:00:00Z".into(),
            ..job()
        })
        .unwrap_err();
    assert!(e.contains("reserved"), "{e}");
    assert!(l.check_topics(&[]).is_err());
}

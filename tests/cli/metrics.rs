//! `metrics`: the store's counters in Prometheus' text format.

use std::fs;

use crate::common::*;

/// The `fencelock_grants_total` value of `metrics` output.
fn grants_total(text: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.starts_with("fencelock_grants_total{"))
        .unwrap_or_else(|| panic!("no fencelock_grants_total series:\n{text}"));
    line.rsplit(' ').next().unwrap().parse().expect("a count")
}

#[test]
fn metrics_prints_prometheus_text_whose_grants_grow_with_the_runs() {
    let env = Env::new();
    // A holder keeps the store open, so that its shared counters last between the commands.
    let holder = spawn_holder(&env, "keep-open", "30s", "started", "stop");
    let out = env.run(&["metrics"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let before = grants_total(&text);
    assert!(before >= 1, "the holder's grant: {text}");
    let db = env.db.to_str().unwrap();
    assert!(
        text.contains(&format!(
            "fencelock_grants_total{{store=\"{db}\",scope=\"store\"}} {before}\n"
        )),
        "{text}"
    );
    for _ in 0..3 {
        assert_eq!(
            code(&env.run(&["run", "--lock", "counted", "--", "true"])),
            0
        );
    }
    // A refusal counts too, as no grant.
    assert_eq!(
        code(&env.run(&["run", "--lock", "keep-open", "-n", "true"])),
        LOCKED
    );
    let out = env.run(&["metrics"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(grants_total(&text), before + 3, "{text}");
    assert!(
        text.contains("# TYPE fencelock_wait_seconds histogram\n"),
        "{text}"
    );
    assert!(text.contains("le=\"+Inf\"}"), "{text}");
    assert!(text.contains("reason=\"locked\"} "), "{text}");

    let json = env.json(&["metrics", "--json"]);
    assert_eq!(json["store"], db);
    assert_eq!(json["scope"], "store");
    assert_eq!(json["grants"], before + 3);
    assert!(json["refused_locked"].as_u64().unwrap() >= 1, "{json}");
    assert!(json["releases"].as_u64().unwrap() >= 3, "{json}");
    assert!(json["since_at_ms"].as_i64().unwrap() > 0, "{json}");
    let buckets = json["wait_buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), fencelock::WAIT_BUCKET_BOUNDS.len() + 1);
    assert_eq!(buckets[0]["up_to_ms"], 1);
    assert!(buckets.last().unwrap()["up_to_ms"].is_null());
    for field in [
        "refused_timeout",
        "refused_cancelled",
        "refused_other",
        "stale_writes",
        "lock_lost",
        "waits",
        "wait_ns",
        "ended_released",
        "ended_expired",
        "ended_taken_over",
        "ended_holder_died",
        "leases_lost",
        "commits",
        "committed_ops",
        "live_shared",
        "live_permits",
        "queued_waiters",
    ] {
        assert!(json[field].as_u64().is_some(), "{field}: {json}");
    }
    // The gauges: the holder's lease is live, and the file has its size.
    assert_eq!(json["live_exclusive"], 1, "{json}");
    assert_eq!(json["file_bytes"], fs::metadata(&env.db).unwrap().len());
    assert!(
        text.contains(&format!(
            "fencelock_live_leases{{store=\"{db}\",scope=\"store\",kind=\"exclusive\"}} 1\n"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "fencelock_build_info{{store=\"{db}\",scope=\"store\",version=\"{}\"}} 1\n",
            fencelock::VERSION
        )),
        "{text}"
    );

    fs::write(env.path("stop"), "").unwrap();
    assert!(finish(holder).status.success());
}

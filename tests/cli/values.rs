//! `put`, `get`, `delete`, `fence`, `keys` and `info`: fenced values and what the store holds.

use std::fs;
use std::io::Write;
use std::process::Stdio;

use crate::common::*;

#[test]
fn put_get_delete_and_json_round_trip() {
    let env = Env::new();
    let token = env.grant();
    let out = env.put("greeting", b"hello\n", token);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(env.get("greeting"), b"hello\n");

    let json = env.json(&["get", "greeting", "--json"]);
    assert_eq!(json["key"], "greeting");
    assert_eq!(json["value"], "hello\n");
    assert_eq!(json["token"], token);

    // Bytes that are not UTF-8, from a file: stored exactly, and base64 in JSON.
    let file = env.path("blob");
    fs::write(&file, [0xff, 0xfe, 0x00]).unwrap();
    let out = env.run(&[
        "put",
        "blob",
        "--token",
        &token.to_string(),
        "--file",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(env.get("blob"), [0xff, 0xfe, 0x00]);
    let json = env.json(&["get", "blob", "--json"]);
    assert_eq!(json["value_base64"], "//4A");
    assert!(json.get("value").is_none());

    let out = env.run(&[
        "put",
        "x",
        "--token",
        &token.to_string(),
        "--file",
        "/nonexistent/file",
    ]);
    assert_eq!(code(&out), IO);
    assert!(
        stderr(&out).contains("cannot read /nonexistent/file"),
        "{}",
        stderr(&out)
    );

    let out = env.run(&["delete", "greeting", "--token", &token.to_string()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = env.run(&["get", "greeting"]);
    assert_eq!(code(&out), NOT_FOUND);
    assert!(
        stderr(&out).contains("no value under key greeting"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_token_defaults_to_fencelock_token() {
    let env = Env::new();
    let token = env.grant();
    let mut child = env
        .cmd(&["put", "k"])
        .env("FENCELOCK_TOKEN", token.to_string())
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"from env").unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(env.json(&["get", "k", "--json"])["token"], token);

    let out = env
        .cmd(&["delete", "k"])
        .env("FENCELOCK_TOKEN", "seven")
        .output()
        .unwrap();
    assert_eq!(code(&out), USAGE);
    assert!(stderr(&out).contains("FENCELOCK_TOKEN"), "{}", stderr(&out));
}

#[test]
fn stale_tokens_are_refused_with_84_and_change_nothing() {
    let env = Env::new();
    let old = env.grant();
    let new = env.grant();
    assert!(new > old);
    assert_eq!(code(&env.put("k", b"new", new)), 0);

    let out = env.put("k", b"old", old);
    assert_eq!(code(&out), STALE_TOKEN);
    assert!(stderr(&out).contains("stale token"), "{}", stderr(&out));
    let out = env.run(&["delete", "k", "--token", &old.to_string()]);
    assert_eq!(code(&out), STALE_TOKEN);
    assert_eq!(env.get("k"), b"new");
    assert_eq!(env.json(&["get", "k", "--json"])["token"], new);

    // A delete keeps its token: an older write after it is still refused.
    assert_eq!(
        code(&env.run(&["delete", "k", "--token", &new.to_string()])),
        0
    );
    assert_eq!(code(&env.put("k", b"old", old)), STALE_TOKEN);
    assert_eq!(code(&env.run(&["get", "k"])), NOT_FOUND);

    // External fences: equal or higher passes, lower is refused.
    let fence = |token: u64| code(&env.run(&["fence", "bucket", "--token", &token.to_string()]));
    assert_eq!(fence(new), 0);
    assert_eq!(fence(new), 0);
    assert_eq!(fence(old), STALE_TOKEN);
}

#[test]
fn keys_and_info_show_the_store() {
    let env = Env::new();
    let token = env.grant();
    for key in ["reports/a", "reports/b", "other"] {
        assert_eq!(code(&env.put(key, b"v", token)), 0);
    }
    let out = env.run(&["keys", "reports/"]);
    assert_eq!(code(&out), 0);
    assert_eq!(stdout(&out), "reports/a\nreports/b\n");
    let out = env.run(&["keys"]);
    assert_eq!(stdout(&out), "other\nreports/a\nreports/b\n");
    let json = env.json(&["keys", "--json"]);
    assert_eq!(
        json,
        serde_json::json!([{"key": "other"}, {"key": "reports/a"}, {"key": "reports/b"}])
    );
    assert_eq!(
        code(&env.run(&["fence", "bucket", "--token", &token.to_string()])),
        0
    );

    let json = env.json(&["info", "--json"]);
    assert_eq!(json["file"], env.db.to_str().unwrap());
    assert_eq!(json["last_token"], token);
    assert_eq!(json["keys"], 3);
    assert_eq!(json["fences"], 1);
    assert_eq!(json["schema_version"], fencelock::SCHEMA_VERSION);
    assert!(json["size_bytes"].as_u64().unwrap() > 0);
    assert!(json["lock_records"].as_u64().is_some());

    let out = env.run(&["info"]);
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    assert!(
        text.contains(&format!("last token      {token}\n")),
        "{text}"
    );
    assert!(text.contains("keys            3\n"), "{text}");
    assert!(text.contains(env.db.to_str().unwrap()), "{text}");
}

#[test]
fn an_endless_value_stops_at_the_limit_with_a_usage_error() {
    let env = Env::new();
    let token = env.grant();
    for args in [
        vec!["put", "k", "--token"],
        vec!["put", "k", "--file", "/dev/zero", "--token"],
    ] {
        let token = token.to_string();
        let mut args = args.clone();
        args.push(&token);
        let zero = fs::File::open("/dev/zero").unwrap();
        let out = env
            .cmd(&args)
            .stdin(zero)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(code(&out), USAGE, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("over the limit"), "{}", stderr(&out));
    }
    assert_eq!(code(&env.run(&["get", "k"])), NOT_FOUND);
}

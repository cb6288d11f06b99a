//! `history --svg`: the GC-pause story drawn from a store's history, with the pauses and writes
//! of an events file marked on their leases.

use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencelock::{Error, Store};
use serde_json::Value;

use crate::common::*;

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// Parses `svg` as XML (python3's minidom: a picture that is not well-formed fails here) and
/// gives, for each lease group in order, its token, ending, bars, overruns, marks and the token
/// labels drawn on it, and the axis' tick labels.
fn parse(svg: &str) -> Value {
    const SCRIPT: &str = r#"
import json, sys, xml.dom.minidom
doc = xml.dom.minidom.parseString(sys.stdin.buffer.read())
assert doc.documentElement.tagName == "svg"
def cls(node, name):
    return [e for e in node.getElementsByTagName("*") if e.getAttribute("class") == name]
leases = []
for g in cls(doc, "lease"):
    leases.append({
        "token": int(g.getAttribute("data-token")),
        "ending": g.getAttribute("data-ending"),
        "bars": len(cls(g, "bar")),
        "overruns": len(cls(g, "overrun")),
        "pauses": len(cls(g, "pause")),
        "refused": [int(m.getAttribute("data-token")) for m in cls(g, "refused")],
        "accepted": [int(m.getAttribute("data-token")) for m in cls(g, "accepted")],
        "labels": [t.firstChild.data for t in cls(g, "token")],
    })
ticks = [t.firstChild.data for t in cls(doc, "tick")]
print(json.dumps({"leases": leases, "ticks": ticks}))
"#;
    let mut child = Command::new("python3")
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (scripts/setup.sh installs it)");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), svg.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}\n{svg}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A holds the lock with token N and is "paused" past its TTL; B takes it over with N+1 and
/// writes; A's late write with N is refused. The picture has one bar per lease, A's drawn on
/// past its expiry to B's grant, the token on each bar, the pause on A's row, B's write on B's
/// bar and the refused write on A's; the same inputs give the same bytes.
#[test]
#[allow(clippy::float_cmp)] // The first event is at exactly 0 s.
fn svg_draws_the_gc_pause_story_from_the_history_and_the_events() {
    let env = Env::new();
    let store = Store::open(&env.db).unwrap();
    let key = b"payments/today.csv";
    let a = store
        .acquire("payment-export", Duration::from_millis(300))
        .unwrap();
    let n = a.token();
    let paused_at = now_ms();
    std::thread::sleep(Duration::from_millis(400));
    let b = store
        .acquire("payment-export", Duration::from_secs(30))
        .unwrap();
    assert_eq!(b.token(), n + 1);
    let wrote_at = now_ms();
    store.put(key, b"B's", n + 1).unwrap();
    let resumed_at = now_ms();
    let refused_at = now_ms();
    assert!(matches!(
        store.put(key, b"A's", n),
        Err(Error::StaleToken { .. })
    ));
    b.release().unwrap();
    drop(a);
    drop(store);
    let events = format!(
        "{{\"event\":\"paused\",\"token\":{n},\"at_ms\":{paused_at}}}\n\
         {{\"event\":\"write-accepted\",\"token\":{},\"at_ms\":{wrote_at},\"key\":\"payments/today.csv\"}}\n\
         \n\
         {{\"event\":\"resumed\",\"token\":{n},\"at_ms\":{resumed_at}}}\n\
         {{\"event\":\"write-refused\",\"token\":{n},\"at_ms\":{refused_at},\"key\":\"payments/today.csv\"}}\n\
         {{\"event\":\"write-refused\",\"token\":999,\"at_ms\":{refused_at}}}\n",
        n + 1
    );
    fs::write(env.path("events.jsonl"), &events).unwrap();
    let events_path = env.path("events.jsonl");
    let events_arg = events_path.to_str().unwrap();

    let out = env.run(&["history", "payment-export", "--svg", "--events", events_arg]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // The event of a lease not in this history is left out, and said.
    assert!(
        stderr(&out)
            .contains("1 event of leases not in the history of \"payment-export\" left out"),
        "{}",
        stderr(&out)
    );
    let svg = stdout(&out);
    let parsed = parse(&svg);
    let leases = parsed["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 2, "one bar per lease: {parsed}");
    let (la, lb) = (&leases[0], &leases[1]);
    assert_eq!(la["token"], n, "{parsed}");
    assert_eq!(la["ending"], "taken-over", "{parsed}");
    assert_eq!(la["bars"], 1, "{parsed}");
    assert_eq!(
        la["overruns"], 1,
        "A's lease drawn on past its expiry: {parsed}"
    );
    assert_eq!(la["pauses"], 1, "{parsed}");
    assert_eq!(
        la["refused"],
        serde_json::json!([n]),
        "the refused write on A's bar: {parsed}"
    );
    assert_eq!(la["accepted"], serde_json::json!([]), "{parsed}");
    assert_eq!(la["labels"], serde_json::json!([n.to_string()]), "{parsed}");
    assert_eq!(lb["token"], n + 1, "{parsed}");
    assert_eq!(lb["ending"], "released", "{parsed}");
    assert_eq!(
        (&lb["bars"], &lb["overruns"], &lb["pauses"]),
        (&1.into(), &0.into(), &0.into())
    );
    assert_eq!(lb["accepted"], serde_json::json!([n + 1]), "{parsed}");
    assert_eq!(lb["refused"], serde_json::json!([]), "{parsed}");
    assert_eq!(
        lb["labels"],
        serde_json::json!([(n + 1).to_string()]),
        "{parsed}"
    );
    let ticks = parsed["ticks"].as_array().unwrap();
    assert!(ticks.len() >= 3, "a time axis: {parsed}");
    let seconds: Vec<f64> = ticks
        .iter()
        .map(|t| {
            t.as_str()
                .unwrap()
                .strip_suffix(" s")
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(seconds[0], 0.0, "{parsed}");
    assert!(seconds.windows(2).all(|w| w[0] < w[1]), "{parsed}");

    // Deterministic: the same history and events, the same bytes; events from standard input
    // as from the file.
    let again = env.run(&["history", "payment-export", "--svg", "--events", events_arg]);
    assert_eq!(stdout(&again), svg);
    let piped = env.run_with_input(
        &["history", "payment-export", "--svg", "--events", "-"],
        events.as_bytes(),
    );
    assert_eq!(stdout(&piped), svg);

    // Without events: the bars alone.
    let bare = parse(&stdout(&env.run(&["history", "payment-export", "--svg"])));
    let leases = bare["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 2, "{bare}");
    assert!(leases
        .iter()
        .all(|l| l["refused"] == serde_json::json!([]) && l["pauses"] == 0));
}

#[test]
fn svg_refuses_a_bad_events_file_and_prints_nothing() {
    let env = Env::new();
    assert_eq!(code(&env.run(&["run", "--lock", "job", "--", "true"])), 0);
    let file = env.path("events.jsonl");
    let file_arg = file.to_str().unwrap();
    for (text, message) in [
        (
            "{\"event\":\"paused\",\"token\":1}\n",
            "line 1: no \"at_ms\"",
        ),
        (
            "\n{\"event\":\"slept\",\"token\":1,\"at_ms\":5}\n",
            "line 2: unknown event \"slept\"",
        ),
        (
            "{\"event\":\"paused\",\"token\":0,\"at_ms\":5}\n",
            "line 1: no \"token\"",
        ),
        ("not json\n", "line 1: not JSON"),
        (
            "{\"event\":\"resumed\",\"token\":1,\"at_ms\":5}\n",
            "resumed with no pause",
        ),
    ] {
        fs::write(&file, text).unwrap();
        let out = env.run(&["history", "job", "--svg", "--events", file_arg]);
        assert_eq!(code(&out), USAGE, "{text}: {}", stderr(&out));
        assert!(stderr(&out).contains(message), "{text}: {}", stderr(&out));
        assert_eq!(stdout(&out), "", "{text}");
    }
    let missing = env.path("no-such-file");
    let out = env.run(&[
        "history",
        "job",
        "--svg",
        "--events",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), IO, "{}", stderr(&out));
    assert!(stderr(&out).contains("no-such-file"), "{}", stderr(&out));
    // --events draws on the picture only; --svg and --json are two outputs.
    assert_eq!(
        code(&env.run(&["history", "job", "--events", file_arg])),
        USAGE
    );
    assert_eq!(
        code(&env.run(&["history", "job", "--svg", "--json"])),
        USAGE
    );
}

/// The committed pictures parse, and `docs/timeline.svg` (from `make timeline`) tells the
/// story: A's lease taken over, a refused write with A's token on A's row, B's accepted write
/// with the next token on B's.
#[test]
fn committed_pictures_parse_and_the_timeline_tells_the_story() {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let parsed = parse(&fs::read_to_string(docs.join("timeline.svg")).unwrap());
    let leases = parsed["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 2, "{parsed}");
    let n = leases[0]["token"].as_u64().unwrap();
    assert_eq!(leases[0]["ending"], "taken-over", "{parsed}");
    assert_eq!(leases[0]["refused"], serde_json::json!([n]), "{parsed}");
    assert_eq!(leases[1]["token"], n + 1, "{parsed}");
    assert_eq!(
        leases[1]["accepted"],
        serde_json::json!([n + 1]),
        "{parsed}"
    );
    // The architecture picture is drawn by hand: it must at least be well-formed SVG.
    let architecture = parse(&fs::read_to_string(docs.join("architecture.svg")).unwrap());
    assert_eq!(architecture["leases"], serde_json::json!([]));
}

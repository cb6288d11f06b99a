//! Bad options and arguments, of every command: status 80 and a message.

use crate::common::*;

#[test]
fn usage_errors_exit_80_with_a_message() {
    let env = Env::new();
    let cases: &[(&[&str], &str)] = &[
        (&["frobnicate"], "unrecognized subcommand"),
        (&["run", "--lock", "a"], "COMMAND"),
        (&["run", "--", "true"], "--lock"),
        (
            &["run", "--lock", "a", "--ttl", "abc", "--", "true"],
            "expected a number and a unit",
        ),
        (
            &["run", "--lock", "a", "--ttl", "30", "--", "true"],
            "expected a number and a unit",
        ),
        (
            &["run", "--lock", "a", "--ttl", "0s", "--", "true"],
            "greater than zero",
        ),
        (
            &["run", "--lock", "a", "--ttl", "-5s", "--", "true"],
            "negative",
        ),
        (
            &["run", "--lock", "a", "-w", "soon", "true"],
            "bare number of seconds",
        ),
        (&["run", "--lock", "a", "--wait", "-1", "true"], "negative"),
        (
            &["run", "--lock", "a", "-n", "-w", "1", "true"],
            "cannot be used with",
        ),
        (
            &["run", "--lock", "a", "-c", "true", "echo"],
            "cannot be used with",
        ),
        (
            &["run", "--lock", "a", "-E", "256", "true"],
            "invalid value",
        ),
        (
            &["run", "--lock", "a", "--lost-signal", "NOPE", "--", "true"],
            "unknown signal",
        ),
        (&["run", "--lock", "", "--", "true"], "lock name is empty"),
        (&["put", "k", "--token", "abc"], "invalid value"),
        (&["put", "k"], "no token"),
        (&["put", "k", "--token", "0"], "token 0"),
        (&["delete", "k"], "no token"),
        (&["fence", "r"], "no token"),
        (&["get"], "KEY"),
        (&["get", "k", "--busy-timeout", "0s"], "greater than zero"),
    ];
    for (args, message) in cases {
        let out = env.run(args);
        assert_eq!(code(&out), USAGE, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(message), "{args:?}: {}", stderr(&out));
    }
    // A TTL the keep-alive cannot renew is refused with the arguments: no store, no token.
    let fresh = Env::new();
    let out = fresh.run(&["run", "--lock", "a", "--ttl", "1ms", "--", "true"]);
    assert_eq!(code(&out), USAGE, "{}", stderr(&out));
    assert!(stderr(&out).contains("outside 3ms"), "{}", stderr(&out));
    assert!(!fresh.db.exists(), "a refused run created the store");
    // A token the store never granted is refused, and nothing is written.
    let granted = env.grant();
    let out = env.put("k", b"v", granted + 1);
    assert_eq!(code(&out), USAGE);
    assert!(stderr(&out).contains("never granted"), "{}", stderr(&out));
    assert_eq!(code(&env.run(&["get", "k"])), NOT_FOUND);
}

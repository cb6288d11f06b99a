//! `top`: the live view, driven as a person would in a tmux pane (send-keys, capture-pane)
//! against a store with real holders and a waiter; and its plain-text form when standard output
//! is not a terminal.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

/// A tmux server of its own (its socket named after the test), killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(socket: &str, width: u16, height: u16, command: &str) -> Tmux {
        let tmux = Tmux {
            socket: format!("fencelock-{socket}-{}", std::process::id()),
        };
        let (width, height) = (width.to_string(), height.to_string());
        let status = tmux
            .command(&["new-session", "-d", "-x", &width, "-y", &height, command])
            .status()
            .expect("tmux: scripts/setup.sh installs it");
        assert!(status.success());
        tmux
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("tmux");
        command
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .stdin(Stdio::null());
        command
    }

    fn screen(&self) -> String {
        let out = self.command(&["capture-pane", "-p"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys"];
        args.extend_from_slice(keys);
        assert!(self.command(&args).status().unwrap().success());
    }

    /// Waits until the screen shows what `shows` looks for, and returns it. Bounded only so
    /// that a broken view fails the test instead of hanging it.
    fn until(&self, what: &str, shows: impl Fn(&str) -> bool) -> String {
        let give_up = Instant::now() + Duration::from_secs(60);
        loop {
            let screen = self.screen();
            if shows(&screen) {
                return screen;
            }
            assert!(Instant::now() < give_up, "never {what}:\n{screen}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn alive(&self) -> bool {
        self.command(&["has-session"])
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self
            .command(&["kill-server"])
            .stderr(Stdio::null())
            .status();
    }
}

/// The row of the screen that starts with `name` and has `state`.
fn row<'a>(screen: &'a str, name: &str, state: &str) -> Option<&'a str> {
    screen.lines().find(|line| {
        let mut fields = line.split_whitespace();
        fields.next() == Some(name) && fields.next() == Some(state)
    })
}

#[test]
fn top_shows_holders_and_waiters_sorts_picks_a_lock_shows_its_history_and_quits() {
    let env = Env::new();
    let export = spawn_holder(&env, "export", "30s", "s1", "stop");
    let backup = spawn_holder(&env, "backup", "30s", "s2", "stop");
    let waiter = env
        .cmd(&[
            "run",
            "--lock",
            "backup",
            "-w",
            "60",
            "--",
            "echo",
            "late-backup",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let command = format!(
        "{BIN} --db {} top --interval 200ms",
        env.db.to_str().unwrap()
    );
    let tmux = Tmux::start("top", 150, 30, &command);

    // Held longest first: export, then backup with its waiter.
    let screen = tmux.until("the holders and the waiter", |s| {
        row(s, "backup", "waiting").is_some() && s.contains("grants/s")
    });
    assert!(screen.contains("sorted by hold time"), "{screen}");
    let export_row = row(&screen, "export", "held").unwrap();
    assert!(export_row.contains(&export.id().to_string()), "{screen}");
    assert!(
        export_row.contains("fencelock run --lock export"),
        "{screen}"
    );
    let waiting = row(&screen, "backup", "waiting").unwrap();
    assert!(waiting.contains(&waiter.id().to_string()), "{screen}");
    assert!(
        waiting.contains("fencelock run --lock backup -w 60"),
        "{screen}"
    );
    let at = |s: &str, name: &str, state: &str| {
        s.lines()
            .position(|line| Some(line) == row(s, name, state))
            .unwrap()
    };
    assert!(
        at(&screen, "export", "held") < at(&screen, "backup", "held"),
        "{screen}"
    );

    // Longest waiter first: backup comes first.
    tmux.keys(&["w"]);
    let screen = tmux.until("the order by wait", |s| s.contains("sorted by wait time"));
    assert!(
        at(&screen, "backup", "held") < at(&screen, "export", "held"),
        "{screen}"
    );

    // Pick the second lock (export) and show its history: its grant, held.
    tmux.keys(&["Down", "Enter"]);
    let screen = tmux.until("the history", |s| s.contains("history of export"));
    let history = screen.split("history of export").nth(1).unwrap();
    assert!(history.contains("HOW"), "{screen}");
    assert!(
        history
            .lines()
            .any(|line| line.split_whitespace().last() == Some("held")),
        "{screen}"
    );
    tmux.keys(&["Escape"]);
    tmux.until("the history hidden", |s| !s.contains("history of"));

    tmux.keys(&["q"]);
    let give_up = Instant::now() + Duration::from_secs(60);
    while tmux.alive() {
        assert!(
            Instant::now() < give_up,
            "top did not quit:\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    std::fs::write(env.path("stop"), "").unwrap();
    assert!(finish(export).status.success());
    assert!(finish(backup).status.success());
    assert_eq!(stdout(&finish(waiter)), "late-backup\n");
}

#[test]
fn top_prints_plain_text_again_every_interval_when_not_on_a_terminal() {
    let env = Env::new();
    let holder = spawn_holder(&env, "export", "30s", "started", "stop");
    let out = env.run(&["top", "-n", "2", "--interval", "100ms"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.matches("sorted by hold time").count(), 2, "{text}");
    assert_eq!(text.matches("\nexport ").count(), 2, "{text}");
    // The second listing has rates: the counters moved between the two looks (or not).
    assert!(text.contains("grants/s"), "{text}");
    assert!(!text.contains('\x1b'), "no escape codes: {text:?}");
    std::fs::write(env.path("stop"), "").unwrap();
    assert!(finish(holder).status.success());
}

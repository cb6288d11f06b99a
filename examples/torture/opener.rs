//! An opener process: started while a worker is stopped inside a commit or inside an open, it
//! opens the store with a short busy timeout, reads (get, locks, info), maybe writes once, logs
//! every operation like a worker and exits. Its open and its write may be refused with
//! `Timeout` while the store is held; they must never hang and never fail otherwise.

use std::process::ExitCode;
use std::time::Duration;

use fencelock::{Options, Store};

use crate::history::{Kind, Outcome};
use crate::rng::Rng;
use crate::worker::{outcome, parse_write_log, value_name, write_log_arg, Log, KEYS, RESOURCES};

pub struct Args {
    pub store: String,
    pub log: String,
    pub index: usize,
    pub seed: u64,
    pub busy_timeout_ms: u64,
    /// `Options::write_log`, as the workers'.
    pub write_log: bool,
}

impl Args {
    pub fn to_argv(&self) -> Vec<String> {
        vec![
            "opener".into(),
            self.store.clone(),
            self.log.clone(),
            self.index.to_string(),
            self.seed.to_string(),
            self.busy_timeout_ms.to_string(),
            write_log_arg(self.write_log),
        ]
    }

    fn parse(argv: &[String]) -> Option<Args> {
        match argv {
            [store, log, index, seed, busy_timeout_ms, write_log] => Some(Args {
                store: store.clone(),
                log: log.clone(),
                index: index.parse().ok()?,
                seed: seed.parse().ok()?,
                busy_timeout_ms: busy_timeout_ms.parse().ok()?,
                write_log: parse_write_log(write_log)?,
            }),
            _ => None,
        }
    }
}

pub fn main(argv: &[String]) -> ExitCode {
    let Some(args) = Args::parse(argv) else {
        eprintln!(
            "usage: torture opener STORE LOG INDEX SEED BUSY_TIMEOUT_MS write-log|store-file"
        );
        return ExitCode::from(2);
    };
    let log = Log::create(&args.log);
    let mut rng = Rng::new(args.seed);
    let options = Options {
        busy_timeout: Duration::from_millis(args.busy_timeout_ms),
        write_log: args.write_log,
        ..Options::default()
    };
    let op = log.begin(0, Kind::Open, |_| {});
    let opened = Store::open_with(&args.store, &options);
    log.end(&op, &outcome(&opened, |_| Outcome::Ok));
    // A refused open is in the log, for the checker to judge.
    let Ok(store) = opened else {
        return ExitCode::SUCCESS;
    };
    // Tokens read, for the write: the last one granted, or those of values found.
    let mut tokens = Vec::new();
    for _ in 0..rng.range(1, 3) {
        let key = *rng.pick(&KEYS);
        let op = log.begin(0, Kind::Get, |op| op.key = Some(key.into()));
        let result = store.get(key.as_bytes());
        log.end(
            &op,
            &outcome(&result, |found| match found {
                Some(fenced) => {
                    tokens.push(fenced.token);
                    Outcome::Value(fenced.token, value_name(&fenced.value))
                }
                None => Outcome::NotFound,
            }),
        );
    }
    let op = log.begin(0, Kind::Locks, |_| {});
    let result = store.locks();
    log.end(
        &op,
        &outcome(&result, |locks| {
            Outcome::Locks(locks.iter().map(|l| (l.name.clone(), l.token)).collect())
        }),
    );
    let op = log.begin(0, Kind::Info, |_| {});
    let result = store.info();
    log.end(
        &op,
        &outcome(&result, |info| {
            tokens.push(info.last_token);
            Outcome::Info(info.last_token)
        }),
    );
    tokens.retain(|&t| t != 0);
    if rng.chance(60) {
        let token = if tokens.is_empty() {
            1
        } else {
            *rng.pick(&tokens)
        };
        if rng.chance(70) {
            let key = *rng.pick(&KEYS);
            let value = format!("o{}.0.1", args.index);
            let op = log.begin(0, Kind::Put, |op| {
                op.key = Some(key.into());
                op.token = token;
                op.value = Some(value.clone());
            });
            let result = store.put(key.as_bytes(), value.as_bytes(), token);
            log.end(&op, &outcome(&result, |()| Outcome::Ok));
        } else {
            let resource = *rng.pick(&RESOURCES);
            let op = log.begin(0, Kind::Fence, |op| {
                op.lock = Some(resource.into());
                op.token = token;
            });
            let result = store.fence(resource, token);
            log.end(&op, &outcome(&result, |()| Outcome::Ok));
        }
    }
    ExitCode::SUCCESS
}

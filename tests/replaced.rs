//! A store file deleted, renamed or replaced at its path while the store is open: the old
//! handle refuses grants and writes, and its holders report their leases lost, since every
//! process that opens the path now works in another file with tokens of its own.

mod common;

use std::time::Duration;

use fencelock::{Error, Mode, Options, Store};

#[allow(clippy::needless_pass_by_value)] // So that a call reads `replaced(store.put(..))`.
fn replaced<T: std::fmt::Debug>(result: fencelock::Result<T>) -> bool {
    matches!(result, Err(Error::Replaced(_)))
}

type Replace<'a> = &'a dyn Fn(&std::path::Path);

/// The ways a path stops naming the open file.
fn each_replacement(check: impl Fn(&str, Mode, Replace<'_>)) {
    let ways: [(&str, Replace<'_>); 3] = [
        ("deleted", &|path| std::fs::remove_file(path).unwrap()),
        ("renamed", &|path| {
            std::fs::rename(path, path.with_extension("moved")).unwrap();
        }),
        ("restored over", &|path| {
            let copy = path.with_extension("backup");
            std::fs::copy(path, &copy).unwrap();
            std::fs::rename(&copy, path).unwrap();
        }),
    ];
    for mode in [Mode::MultiProcess, Mode::SingleProcess] {
        for (how, replace) in ways {
            check(how, mode, replace);
        }
    }
}

#[test]
fn a_replaced_store_refuses_grants_and_writes_and_its_holders_lose_their_leases() {
    each_replacement(|how, mode, replace| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("locks.db");
        let options = Options {
            mode,
            ..Options::default()
        };
        let store = Store::open_with(&path, &options).unwrap();
        let holder = store.acquire("job", Duration::from_secs(600)).unwrap();
        holder.keep_alive(Duration::from_secs(600)).unwrap();
        holder.put(b"k", b"before").unwrap();
        let token = holder.token();
        replace(&path);

        assert!(
            replaced(store.acquire("other", Duration::from_secs(60))),
            "{how}"
        );
        assert!(replaced(store.put(b"k", b"after", token)), "{how}");
        assert!(replaced(store.delete(b"k", token)), "{how}");
        assert!(replaced(store.fence("printer", token)), "{how}");
        assert!(replaced(holder.put(b"k", b"after")), "{how}");
        assert!(replaced(holder.extend(Duration::from_secs(60))), "{how}");
        assert!(!holder.is_held().unwrap(), "{how}");
        assert!(holder.is_lost(), "{how}");
        assert!(holder.wait_lost(Duration::ZERO), "{how}");
        // Reads of what the old file holds go on.
        assert_eq!(store.get(b"k").unwrap().unwrap().value, b"before", "{how}");

        // Whoever opens the path now gets the file that is there, not the old one.
        drop(store);
        let fresh = Store::open_with(&path, &options).unwrap();
        let next = fresh.acquire("job", Duration::from_secs(60)).unwrap();
        match how {
            // A copy of the old file carries its counter on.
            "restored over" => assert!(next.token() > token, "{how}"),
            // A new file starts its own tokens: the limit the README states.
            _ => assert_eq!(next.token(), 1, "{how}"),
        }
    });
}

#[test]
fn a_store_opened_through_a_symlink_is_not_replaced_by_the_link_itself() {
    let (dir, path, store) = common::temp_store();
    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let through_link = Store::open(&link).unwrap();
    let holder = through_link
        .acquire("job", Duration::from_secs(60))
        .unwrap();
    holder.put(b"k", b"v").unwrap();
    assert_eq!(store.get(b"k").unwrap().unwrap().value, b"v");
    // Repointing the link at another file replaces the store for that path.
    let other = dir.path().join("other.db");
    drop(Store::open(&other).unwrap());
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&other, &link).unwrap();
    assert!(replaced(holder.put(b"k", b"w")));
    assert!(!holder.is_held().unwrap());
    // The store opened by the real path is unaffected.
    let _other = store.acquire("other", Duration::from_secs(60)).unwrap();
}

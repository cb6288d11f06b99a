//! Prefixes are separate stores on one cluster, however they nest.

use std::time::Duration;

use fencelock::{Error, Holder, Store};

use crate::cluster::Cluster;

const LONG: Duration = Duration::from_secs(60);

/// A store's prefix, and a second and third one inside it whose names are the words of the
/// store's own keys (`lock`, `value`, `fence`, `last`).
const NESTED: [&str; 6] = [
    "app",
    "app/lock",
    "app/value",
    "app/fence",
    "app/last",
    "app/lock/lock",
];

/// Lock names and keys that spell another nested store's keys under the old layout.
const NAMES: [&str; 4] = ["job", "lock/job", "last", "value/k"];

#[test]
fn nested_prefixes_grant_write_and_fence_independently() {
    let etcd = Cluster::single();
    let stores: Vec<Store> = NESTED.iter().map(|prefix| etcd.open(prefix)).collect();
    // Every store takes the same names at once: none is refused by another's lock. Try-once
    // acquires: a name held by another store is refused, not waited for.
    let holders: Vec<Vec<Holder>> = stores
        .iter()
        .zip(NESTED)
        .map(|(store, prefix)| {
            NAMES
                .iter()
                .map(|name| {
                    store
                        .acquire(name, LONG)
                        .unwrap_or_else(|err| panic!("{prefix}: acquire {name:?}: {err}"))
                })
                .collect()
        })
        .collect();
    for ((store, prefix), held) in stores.iter().zip(NESTED).zip(&holders) {
        let token = held[0].token();
        for key in NAMES {
            held[0]
                .put(key.as_bytes(), prefix.as_bytes())
                .unwrap_or_else(|err| panic!("{prefix}: put {key:?}: {err}"));
        }
        store
            .fence("resource", token)
            .unwrap_or_else(|err| panic!("{prefix}: fence: {err}"));
    }
    for ((store, prefix), held) in stores.iter().zip(NESTED).zip(&holders) {
        let mut names: Vec<String> = store
            .locks()
            .unwrap_or_else(|err| panic!("{prefix}: locks: {err}"))
            .into_iter()
            .map(|info| info.name)
            .collect();
        names.sort();
        let mut expected: Vec<String> = NAMES.iter().map(|name| (*name).to_owned()).collect();
        expected.sort();
        assert_eq!(names, expected, "{prefix}: the locks of this store only");
        for (holder, name) in held.iter().zip(NAMES) {
            let info = store.lock_info(name).unwrap().expect("held");
            assert_eq!(info.token, holder.token(), "{prefix}: {name}");
            assert!(holder.is_held().unwrap(), "{prefix}: {name}");
        }
        for key in NAMES {
            let got = store.get(key.as_bytes()).unwrap().expect("a value");
            assert_eq!(got.value, prefix.as_bytes(), "{prefix}: {key}");
            assert_eq!(got.token, held[0].token(), "{prefix}: {key}");
        }
        let mut keys = store.keys(b"").unwrap();
        keys.sort();
        let mut expected: Vec<Vec<u8>> = NAMES.iter().map(|key| key.as_bytes().to_vec()).collect();
        expected.sort();
        assert_eq!(keys, expected, "{prefix}: the keys of this store only");
        assert_eq!(
            store.fence_token("resource").unwrap(),
            Some(held[0].token()),
            "{prefix}"
        );
        let info = store.info().unwrap();
        assert_eq!(
            (info.lock_records, info.keys, info.fences),
            (4, 4, 1),
            "{prefix}"
        );
        store
            .verify()
            .unwrap_or_else(|err| panic!("{prefix}: verify: {err}"));
    }
    // A release frees the name in its own store only.
    for held in &holders[1..] {
        held[0].release().unwrap();
    }
    assert!(holders[0][0].is_held().unwrap());
    assert!(matches!(
        stores[0].acquire("job", LONG),
        Err(Error::Locked { token, .. }) if token == holders[0][0].token()
    ));
}

/// Puts `key` into etcd directly, as a program of another fencelock version would.
fn put_raw(etcd: &Cluster, key: &str, delete: bool) {
    let endpoint = format!("http://127.0.0.1:{}", etcd.members[0].client_port);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime
        .block_on(async {
            let mut client = etcd_client::Client::connect([endpoint], None).await?;
            if delete {
                client.delete(key, None).await.map(drop)
            } else {
                client.put(key, "", None).await.map(drop)
            }
        })
        .unwrap();
}

/// A prefix a fencelock of the first etcd layout used (its last-grant key is `PREFIX/last`) is
/// refused, rather than its locks granted a second time beside that version's; other prefixes,
/// nested ones included, open.
#[test]
fn a_prefix_of_the_first_layout_is_refused_until_its_last_key_is_deleted() {
    let etcd = Cluster::single();
    put_raw(&etcd, "old/last", false);
    match Store::open(etcd.url("old")) {
        Err(Error::NotAStore(message)) => {
            assert!(
                message.contains("old/last") && message.contains("old/@/"),
                "{message}"
            );
        }
        Err(err) => panic!("expected NotAStore, got {err:?}"),
        Ok(_) => panic!("expected NotAStore, got a store"),
    }
    drop(etcd.open("old/jobs").acquire("job", LONG).unwrap());
    drop(etcd.open("older").acquire("job", LONG).unwrap());
    put_raw(&etcd, "old/last", true);
    let store = etcd.open("old");
    drop(store.acquire("job", LONG).unwrap());
    store.verify().unwrap();
}

//! The etcd store string: `etcd://host:port[,host:port...][/prefix]`.

use super::records::{self, MARKER};
use crate::base::error::{Error, Result};

/// The scheme that names an etcd store instead of a file.
pub(crate) use crate::engine::ETCD_SCHEME as SCHEME;

/// The prefix of keys when the string names none.
const DEFAULT_PREFIX: &str = "fencelock";

/// A parsed store string: the endpoints to dial and the store's prefix, without a trailing `/`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Url {
    pub(crate) endpoints: Vec<String>,
    pub(crate) prefix: String,
}

impl Url {
    /// What every key of the store starts with (records.rs).
    pub(crate) fn root(&self) -> Vec<u8> {
        records::root(&self.prefix)
    }
}

/// Parses `etcd://host:port,host:port/prefix`; every fault is [`Error::InvalidArgument`].
pub(crate) fn parse(text: &str) -> Result<Url> {
    let bad = |why: String| Error::invalid(format!("{text}: {why}"));
    let rest = text
        .strip_prefix(SCHEME)
        .ok_or_else(|| bad(format!("an etcd store string starts with {SCHEME}")))?;
    let (hosts, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if hosts.is_empty() {
        return Err(bad(
            "no endpoint: write etcd://host:port[,host:port...]/prefix".into(),
        ));
    }
    let mut endpoints = Vec::new();
    for endpoint in hosts.split(',') {
        let (host, port) = endpoint
            .rsplit_once(':')
            .ok_or_else(|| bad(format!("endpoint {endpoint:?} has no :port")))?;
        if host.is_empty() {
            return Err(bad(format!("endpoint {endpoint:?} has no host")));
        }
        match port.parse::<u16>() {
            Ok(port) if port > 0 => endpoints.push(format!("http://{host}:{port}")),
            _ => {
                return Err(bad(format!(
                    "endpoint {endpoint:?} has a bad port {port:?}"
                )))
            }
        }
    }
    let prefix = prefix.trim_end_matches('/');
    if prefix.contains('\0') {
        return Err(bad("the prefix contains a NUL byte".into()));
    }
    // The segment that ends every store's prefix in its keys, so that nested prefixes are
    // separate stores (records.rs).
    if prefix.split('/').any(|segment| segment == MARKER) {
        return Err(bad(format!(
            "the prefix has a segment {MARKER:?}, which ends a prefix in the store's keys"
        )));
    }
    let prefix = if prefix.is_empty() {
        DEFAULT_PREFIX
    } else {
        prefix
    };
    Ok(Url {
        endpoints,
        prefix: prefix.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_and_prefix() {
        let url = parse("etcd://127.0.0.1:2379,localhost:22379/myapp").unwrap();
        assert_eq!(
            url.endpoints,
            ["http://127.0.0.1:2379", "http://localhost:22379"]
        );
        assert_eq!(url.prefix, "myapp");
        assert_eq!(url.root(), b"myapp/@/");
        assert_eq!(parse("etcd://h:1").unwrap().prefix, "fencelock");
        assert_eq!(parse("etcd://h:1/").unwrap().prefix, "fencelock");
        assert_eq!(parse("etcd://h:1/a/b/").unwrap().prefix, "a/b");
        // A segment that holds `@` but is not `@` is an ordinary one.
        assert_eq!(
            parse("etcd://h:1/a@b/@c/d@").unwrap().root(),
            b"a@b/@c/d@/@/"
        );
    }

    /// No store's root starts with another's: a root is its prefix, then `/@/`, and a prefix
    /// has neither a segment `@` nor a trailing `/`, so the first `/@/` of a key ends it.
    #[test]
    fn no_root_is_inside_another() {
        let prefixes = [
            "a",
            "a/b",
            "a/lock",
            "a/lock/lock",
            "a/last",
            "a/value",
            "/a",
            "//a",
            "a//b",
            "a@",
            "@a",
            "a/@b",
            "ab",
            "fencelock",
        ];
        let roots: Vec<Vec<u8>> = prefixes
            .iter()
            .map(|p| parse(&format!("etcd://h:1/{p}")).unwrap().root())
            .collect();
        for (i, a) in roots.iter().enumerate() {
            for (j, b) in roots.iter().enumerate() {
                if i != j {
                    assert!(
                        !b.starts_with(a),
                        "{:?} is inside {:?}",
                        prefixes[j],
                        prefixes[i]
                    );
                }
            }
        }
    }

    #[test]
    fn bad_strings_are_invalid_arguments() {
        for text in [
            "etcd://",
            "etcd:///prefix",
            "etcd://host/prefix",
            "etcd://host:0/p",
            "etcd://host:99999/p",
            "etcd://host:x/p",
            "etcd://:2379/p",
            "etcd://h:1,/p",
            "etcd://h:1/a\0b",
            "etcd://h:1/@",
            "etcd://h:1/a/@",
            "etcd://h:1/a/@/",
            "etcd://h:1/@/a",
            "etcd://h:1/a/@/b",
        ] {
            assert!(
                matches!(parse(text), Err(Error::InvalidArgument(_))),
                "{text:?} was accepted"
            );
        }
    }
}

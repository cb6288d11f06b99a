//! A tiny HTTP/1.1 responder for `/metrics` on std's `TcpListener`, for `fencelock serve
//! --metrics-listen` and `fencelock metrics --listen`: Prometheus scrapes a text page every few
//! seconds, which needs neither an async runtime nor a web framework.
//!
//! One thread answers one connection at a time and closes it after the answer (`Connection:
//! close`); a client that sends nothing is dropped after [`IO_TIMEOUT`]. `GET` and `HEAD` of
//! `/metrics` answer the page, `/` a line that points there; any other path is 404, any other
//! method 405, a request that is no HTTP request line 400. The page is rendered at each scrape.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::thread;
use std::time::Duration;

/// How long a connection may take to send its request, and to take the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request head read; a longer one is answered 400.
const MAX_HEAD: usize = 8192;

/// Prometheus' text exposition format, version 0.0.4.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Parses a listen address: `PORT` or `:PORT` is the loopback address (127.0.0.1), so that
/// nothing is exposed beyond the host unless asked; `HOST:PORT` (`0.0.0.0:9464`,
/// `[::1]:9464`, `localhost:9464`) is taken as given. Port 0 takes a free port.
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let port_only = text.strip_prefix(':').unwrap_or(text);
    if let Ok(port) = port_only.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    text.to_socket_addrs()
        .map_err(|err| format!("{text:?} is no listen address (PORT, :PORT or HOST:PORT): {err}"))?
        .next()
        .ok_or_else(|| format!("{text:?} names no address"))
}

/// What a request asks for, as this responder knows it.
#[derive(Debug, PartialEq, Eq)]
enum Asked {
    Metrics { head: bool },
    Root { head: bool },
    NotFound,
    BadMethod,
    BadRequest,
}

fn parse_request(head: &[u8]) -> Asked {
    let Some(line) = head
        .split(|&b| b == b'\n')
        .next()
        .and_then(|line| std::str::from_utf8(line).ok())
    else {
        return Asked::BadRequest;
    };
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Asked::BadRequest;
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return Asked::BadRequest;
    }
    let head = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Asked::BadMethod,
    };
    match target.split('?').next().unwrap_or_default() {
        "/metrics" => Asked::Metrics { head },
        "/" => Asked::Root { head },
        _ => Asked::NotFound,
    }
}

/// Binds `addr` and answers scrapes from a thread of its own for as long as the process runs;
/// `render` makes the page at each scrape (its error is answered 500 with the message). Returns
/// the address bound (the port chosen, for port 0).
pub fn start(
    addr: SocketAddr,
    render: impl Fn() -> Result<String, String> + Send + 'static,
) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    thread::Builder::new()
        .name("fencelock-metrics".into())
        .spawn(move || {
            // A failed accept (a connection reset before it was taken, no descriptor left)
            // ends that connection only.
            for stream in listener.incoming().flatten() {
                let _ = answer(stream, &render);
            }
        })?;
    Ok(bound)
}

fn answer(mut stream: TcpStream, render: &impl Fn() -> Result<String, String>) -> io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 || head.len() + n > MAX_HEAD {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let (status, content_type, body, head_only) = match parse_request(&head) {
        Asked::Metrics { head } => match render() {
            Ok(page) => ("200 OK", METRICS_CONTENT_TYPE, page, head),
            Err(err) => (
                "500 Internal Server Error",
                "text/plain; charset=utf-8",
                format!("{err}\n"),
                head,
            ),
        },
        Asked::Root { head } => (
            "200 OK",
            "text/plain; charset=utf-8",
            "fencelock: the metrics are at /metrics\n".to_owned(),
            head,
        ),
        Asked::NotFound => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found: the metrics are at /metrics\n".to_owned(),
            false,
        ),
        Asked::BadMethod => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET and HEAD\n".to_owned(),
            false,
        ),
        Asked::BadRequest => (
            "400 Bad Request",
            "text/plain; charset=utf-8",
            "bad request\n".to_owned(),
            false,
        ),
    };
    let allow = if status.starts_with("405") {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{allow}\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        response.extend_from_slice(body.as_bytes());
    }
    stream.write_all(&response)?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_alone_listens_on_the_loopback_address_and_a_host_as_given() {
        assert_eq!(
            parse_listen("9464").unwrap(),
            "127.0.0.1:9464".parse().unwrap()
        );
        assert_eq!(
            parse_listen(":9464").unwrap(),
            "127.0.0.1:9464".parse().unwrap()
        );
        assert_eq!(
            parse_listen("0.0.0.0:9464").unwrap(),
            "0.0.0.0:9464".parse().unwrap()
        );
        assert_eq!(
            parse_listen("[::1]:80").unwrap(),
            "[::1]:80".parse().unwrap()
        );
        assert!(parse_listen("nowhere").is_err());
        assert!(parse_listen("70000").is_err());
    }

    #[test]
    fn requests_are_told_apart_by_method_and_path() {
        assert_eq!(
            parse_request(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Asked::Metrics { head: false }
        );
        assert_eq!(
            parse_request(b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n"),
            Asked::Metrics { head: true }
        );
        assert_eq!(
            parse_request(b"GET / HTTP/1.1\r\n\r\n"),
            Asked::Root { head: false }
        );
        assert_eq!(
            parse_request(b"GET /other HTTP/1.1\r\n\r\n"),
            Asked::NotFound
        );
        assert_eq!(
            parse_request(b"POST /metrics HTTP/1.1\r\n\r\n"),
            Asked::BadMethod
        );
        assert_eq!(parse_request(b"hello\r\n\r\n"), Asked::BadRequest);
        assert_eq!(parse_request(b""), Asked::BadRequest);
    }
}

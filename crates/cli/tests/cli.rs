//! The `fastfallback` binary as a user runs it, against servers on loopback (no root needed):
//! waterfalls, JSON, exit codes, TLS with a custom CA, and `get` over HTTP/2.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Command, Output};

use fastfallback_testnet::TlsMaterial;
use fastfallback_testnet::http::{HttpOptions, serve};

fn fastfallback(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fastfallback"))
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("CLICOLOR_FORCE")
        .output()
        .expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A TCP server on 127.0.0.1 that accepts and holds connections, on a thread of its own.
fn accepting_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    addr
}

/// A port on 127.0.0.1 where nothing listens.
fn closed_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// An HTTPS server for `localhost` on 127.0.0.1 (HTTP/2 when ALPN picks h2), and a file
/// holding its CA certificate (DER).
struct Https {
    addr: SocketAddr,
    ca: PathBuf,
    _runtime: tokio::runtime::Runtime,
}

/// What a test's servers need: a certificate for `name`, a file holding its CA (DER), named
/// after the test, and a runtime of one worker for them.
fn server_set_up(test: &str, name: &str) -> (TlsMaterial, PathBuf, tokio::runtime::Runtime) {
    let tls = TlsMaterial::new(&[name.to_owned()], &[]).unwrap();
    let ca = std::env::temp_dir().join(format!(
        "fastfallback-cli-{test}-{}.der",
        std::process::id()
    ));
    std::fs::write(&ca, tls.ca_der().as_ref()).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    (tls, ca, runtime)
}

impl Https {
    fn start(test: &str, alpn: &[&[u8]]) -> Self {
        let (tls, ca, runtime) = server_set_up(test, "localhost");
        let alpn: Vec<Vec<u8>> = alpn.iter().map(|a| a.to_vec()).collect();
        let addr = runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let options = HttpOptions {
                tls: Some(tls.with_alpn(&alpn)),
                ..HttpOptions::default()
            };
            serve(listener, options);
            addr
        });
        Self {
            addr,
            ca,
            _runtime: runtime,
        }
    }

    fn url(&self) -> String {
        format!("https://localhost:{}/", self.addr.port())
    }
}

impl Drop for Https {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.ca);
    }
}

#[test]
fn connect_draws_a_waterfall_for_a_loopback_origin() {
    let addr = accepting_server();
    let out = fastfallback(&["connect", &addr.to_string()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    let first = text.lines().next().unwrap();
    assert!(
        first.starts_with(&format!("race to tcp://{addr}: won by #1 in ")),
        "{text}"
    );
    let row = text
        .lines()
        .find(|l| l.contains(&format!("#1 v4 {addr}")))
        .unwrap_or_else(|| panic!("no attempt row\n{text}"));
    assert!(row.contains('▒') && row.ends_with("│ won"), "{row}");
    assert!(
        text.contains(&format!("  winner  #1 {addr} (IPv4)")),
        "{text}"
    );
    assert!(text.contains("  timing  dns 0.0 ms + waiting "), "{text}");
    assert!(!text.contains('\u{1b}'), "NO_COLOR is respected\n{text}");
}

#[test]
fn connect_to_a_closed_port_shows_the_refusal_and_exits_1() {
    let addr = closed_port();
    let out = fastfallback(&["connect", &format!("tcp://{addr}")]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert!(text.contains(": failed in "), "{text}");
    assert!(text.contains("failed: connection refused"), "{text}");
    assert!(text.contains("  error   "), "{text}");
}

#[test]
fn connect_json_is_one_object_with_a_report_per_contact() {
    let (open, closed) = (accepting_server(), closed_port());
    let out = fastfallback(&["connect", &open.to_string(), &closed.to_string(), "--json"]);
    assert_eq!(out.status.code(), Some(1), "one contact failed");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let contacts = json["contacts"].as_array().unwrap();
    assert_eq!(contacts.len(), 2);
    assert_eq!(contacts[0]["origin"], format!("tcp://{open}"));
    assert_eq!(contacts[0]["winner"], 1);
    assert_eq!(contacts[0]["attempts"][0]["family"], "v4");
    assert_eq!(contacts[0]["attempts"][0]["outcome"]["status"], "won");
    assert!(contacts[0]["elapsed_ms"].as_f64().unwrap() > 0.0);
    let failed = &contacts[1]["attempts"][0]["outcome"];
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["kind"], "refused");
    assert_eq!(failed["phase"], "tcp");
}

#[test]
fn connect_over_tls_with_a_custom_ca_negotiates_h2() {
    let server = Https::start("connect", &[b"h2", b"http/1.1"]);
    let ca = server.ca.to_str().unwrap();
    let out = fastfallback(&["connect", &server.url(), "--ca", ca]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains(", ALPN h2"), "{text}");
    assert!(text.contains("█"), "the TLS handshake is drawn\n{text}");

    let out = fastfallback(&["connect", &server.url(), "--ca", ca, "--alpn", "http/1.1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains(", ALPN http/1.1"), "{}", stdout(&out));
}

#[test]
fn connect_without_the_ca_fails_on_the_certificate() {
    let server = Https::start("untrusted", &[b"h2"]);
    let out = fastfallback(&["connect", &server.url(), "--policy", "connect_timeout=5s"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert!(text.contains("failed: tls handshake failed"), "{text}");
}

#[test]
fn get_over_h2_prints_status_protocol_and_timing() {
    let server = Https::start("get", &[b"h2"]);
    let out = fastfallback(&["get", &server.url(), "--ca", server.ca.to_str().unwrap()]);
    // Diagnostics on stderr; stdout is the body alone.
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stdout(&out));
    let first = text.lines().next().unwrap();
    assert_eq!(first, "200 OK over HTTP/2, on a new connection", "{text}");
    assert!(text.contains("  timing  connect "), "{text}");
    assert!(text.contains(", ALPN h2"), "the race is drawn too\n{text}");
}

#[test]
fn bad_arguments_and_knob_values_exit_2_naming_them_and_bad_settings_exit_3() {
    let out = fastfallback(&["connect"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("URL|HOST:PORT"), "{}", stderr(&out));

    for command in ["connect", "get"] {
        let target = if command == "get" {
            "http://localhost:1/"
        } else {
            "localhost:1"
        };
        for knob in ["attempt_delay=1ms", "no_such_knob=1"] {
            let out = fastfallback(&[command, target, "--policy", knob]);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{command} {knob}: {}",
                stderr(&out)
            );
            let name = knob.split('=').next().unwrap();
            assert!(stderr(&out).contains(name), "{}", stderr(&out));
        }
        for width in ["0", "9", "1001", "99999999999", "x"] {
            let out = fastfallback(&[command, target, "--width", width]);
            assert_eq!(
                out.status.code(),
                Some(2),
                "--width {width}: {}",
                stderr(&out)
            );
            assert!(stderr(&out).contains("--width"), "{}", stderr(&out));
        }
    }

    let out = fastfallback(&["connect", "localhost:1", "--ca", "/nonexistent/ca.pem"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("--ca /nonexistent/ca.pem"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn help_lists_every_policy_knob_and_the_exit_codes() {
    let out = fastfallback(&["connect", "--help"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0));
    for (key, _) in fastfallback_plan_keys() {
        assert!(text.contains(key), "--help lacks {key}\n{text}");
    }
    let top = stdout(&fastfallback(&["--help"]));
    assert!(
        top.contains("Exit codes:") && top.contains("NO_COLOR"),
        "{top}"
    );
    let version = stdout(&fastfallback(&["--version"]));
    assert_eq!(
        version.trim(),
        concat!("fastfallback ", env!("CARGO_PKG_VERSION"))
    );
}

fn fastfallback_plan_keys() -> &'static [(&'static str, &'static str)] {
    fastfallback_plan::POLICY_KEYS
}

#[test]
fn demo_plays_every_canned_race_offline() {
    let out = fastfallback(&["demo"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(text.matches("== ").count(), 12, "{text}");
    assert!(text.contains("sockets left open: 0"), "{text}");
    // The QUIC scenarios: QUIC wins (T44); UDP blocked, TCP one attempt delay later (T43);
    // then TCP first, from broken-QUIC memory.
    assert!(text.contains("start #1 quic [2001:db8::a]:443"), "{text}");
    let second = text
        .split("== UDP blocked, second contact ==")
        .nth(1)
        .expect("the second contact");
    let first_start = second.lines().find(|l| l.contains("start #1")).unwrap();
    assert!(first_start.contains("start #1 tcp"), "{second}");
    assert_eq!(
        fastfallback(&["demo", "no such scenario"]).status.code(),
        Some(1)
    );
}

/// Needs root (network namespaces). Without it the binary says so and exits 3; the test then
/// prints that it skipped, and fails under `CI=true`.
#[test]
fn demo_testnet_draws_the_first_and_second_contact_over_a_blackholed_ipv6() {
    let out = fastfallback(&["demo", "--testnet"]);
    let (text, err) = (stdout(&out), stderr(&out));
    if out.status.code() == Some(3) && err.contains("needs CAP_NET_ADMIN") {
        assert!(
            std::env::var("CI").map_or(true, |v| !v.eq_ignore_ascii_case("true")),
            "CI=true: demo --testnet must run here: {err}"
        );
        eprintln!("skipped: needs CAP_NET_ADMIN (demo --testnet): {err}");
        return;
    }
    assert_eq!(out.status.code(), Some(0), "{text}{err}");
    let (first, second) = text.split_once("== Second contact ==").unwrap();
    assert!(first.contains("won by #2"), "{first}");
    let v6_row = first.lines().find(|l| l.contains("#1 v6")).unwrap();
    assert!(
        v6_row.ends_with("cancelled: lost the race (in tcp)"),
        "{v6_row}"
    );
    // The IPv4 attempt starts one Connection Attempt Delay (250 ms) after IPv6. Both starts
    // are read from the race's start, which includes the DNS time, so the gap between them is
    // asserted: never early (−1 ms, as in the wire tests, for the drawn values' rounding to
    // 0.1 ms and the timer's 1 ms steps), and late by at most the wire tests' load slack
    // (`fastfallback_testkit::wire::SLACK`, 25 ms): a loaded 2-core CI machine fires the
    // 250 ms timer late, and the wrong timelines (IPv4 at once, or never) are far away.
    let start_of = |row: &str| -> f64 { row.split_whitespace().nth(3).unwrap().parse().unwrap() };
    let v4_row = first.lines().find(|l| l.contains("#2 v4")).unwrap();
    let gap = start_of(v4_row) - start_of(v6_row);
    assert!(
        (249.0..=250.0 + 25.0).contains(&gap),
        "IPv4 start {gap:.1} ms after IPv6, expected 250 ms (−1/+25 ms)\n{v6_row}\n{v4_row}"
    );
    // Route memory: the second contact goes to IPv4 first and only.
    assert!(second.contains("won by #1"), "{second}");
    assert!(second.lines().any(|l| l.contains("#1 v4")), "{second}");
    assert!(!second.contains(" v6 "), "{second}");
}

#[test]
fn connect_through_an_http_proxy_shows_it_in_the_waterfall_and_hides_the_password() {
    let server = Https::start("proxy", &[b"h2"]);
    let proxy = server._runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let options = fastfallback_testnet::proxy::ProxyOptions {
            credentials: Some(("u".to_owned(), "hunter2-secret".to_owned())),
        };
        fastfallback_testnet::proxy::serve_http_connect(listener, options);
        addr
    });
    let url = format!("http://u:hunter2-secret@{proxy}");
    let ca = server.ca.to_str().unwrap();
    let out = fastfallback(&["connect", &server.url(), "--ca", ca, "--proxy", &url]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    let row = text
        .lines()
        .find(|l| l.contains("#1 v4"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        row.contains(&format!("#1 v4 {proxy} (http proxy {proxy})")),
        "{row}"
    );
    assert!(row.ends_with("│ won"), "{row}");
    let json = fastfallback(&[
        "connect",
        &server.url(),
        "--ca",
        ca,
        "--proxy",
        &url,
        "--json",
    ]);
    let body = String::from_utf8_lossy(&json.stdout);
    assert!(body.contains(&format!("http proxy {proxy}")), "{body}");
    for o in [&out, &json] {
        assert!(!stdout(o).contains("hunter2") && !stderr(o).contains("hunter2"));
    }
    let bad = fastfallback(&["connect", "localhost:1", "--proxy", "ftp://u:hunter2@x"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(!stderr(&bad).contains("hunter2"), "{}", stderr(&bad));
}

/// Runs the binary like [`fastfallback`], killing it if it has not ended within `limit`.
fn fastfallback_within(args: &[&str], limit: std::time::Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fastfallback"))
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("CLICOLOR_FORCE")
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "fastfallback {args:?} still running after {limit:?}\n{}",
                stderr(&out)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A fresh directory for one test, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("fastfallback-cli-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn join(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

#[test]
fn an_unusable_memory_path_exits_3_naming_it() {
    let dir = TempDir::new("memory-unusable");
    let addr = accepting_server().to_string();
    let missing = dir.join("no-such-dir/routes");
    let fifo = dir.join("routes.fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for path in [&missing, &fifo, &dir.join("")] {
        let out = fastfallback_within(&["connect", &addr, "--memory", path], LIMIT);
        assert_eq!(out.status.code(), Some(3), "{path}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(path.trim_end_matches('/')), "{err}");
        assert!(
            err.contains("cannot save route memory there") || err.contains("not a regular file"),
            "{err}"
        );
    }
}

#[test]
fn a_garbage_memory_file_is_warned_about_on_stderr() {
    let dir = TempDir::new("memory-garbage");
    let file = dir.join("routes");
    std::fs::write(&file, b"this is not route memory").unwrap();
    let addr = accepting_server().to_string();
    let out = fastfallback_within(&["connect", &addr, "--memory", &file], LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("WARN")
            && err.contains("ignoring the route-memory file")
            && err.contains(&file),
        "{err}"
    );
}

#[test]
fn rust_log_turns_the_library_log_up() {
    let addr = accepting_server().to_string();
    let quiet = fastfallback_within(&["connect", &addr], LIMIT);
    assert_eq!(quiet.status.code(), Some(0), "{}", stderr(&quiet));
    assert!(!stderr(&quiet).contains("DEBUG"), "{}", stderr(&quiet));
    let out = Command::new(env!("CARGO_BIN_EXE_fastfallback"))
        .args(["connect", &addr])
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "trace")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("DEBUG") || err.contains("TRACE"), "{err}");
}

/// An HTTP/1.1 server on 127.0.0.1 for one request: it reads the request (head and body,
/// handed to `seen`), answers `status` with `body` chunked, and ends the body only once
/// `finish` says so.
fn http1_server(
    status: &'static str,
    body: impl Fn(&mut dyn std::io::Write) -> std::io::Result<()> + Send + 'static,
    finish: std::sync::mpsc::Receiver<()>,
    seen: std::sync::mpsc::Sender<String>,
) -> SocketAddr {
    use std::io::{BufRead, Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let Ok((conn, _)) = listener.accept() else {
            return;
        };
        let mut reader = std::io::BufReader::new(conn.try_clone().unwrap());
        let mut head = String::new();
        while reader.read_line(&mut head).unwrap_or(0) > 0 && !head.ends_with("\r\n\r\n") {}
        let length = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap_or(0))
            })
            .unwrap_or(0);
        let mut body_in = vec![0; length];
        let _ = reader.read_exact(&mut body_in);
        head.push_str(&String::from_utf8_lossy(&body_in));
        let _ = seen.send(head);
        let mut out = std::io::BufWriter::new(conn);
        let _ = write!(
            out,
            "HTTP/1.1 {status}\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
        let mut chunked = Chunked(&mut out);
        let _ = body(&mut chunked);
        let _ = out.flush();
        let _ = finish.recv();
        let _ = out.write_all(b"0\r\n\r\n");
        let _ = out.flush();
        std::thread::sleep(std::time::Duration::from_millis(200));
    });
    addr
}

/// Writes each buffer as one HTTP/1.1 chunk.
struct Chunked<'a, W: std::io::Write>(&'a mut W);

impl<W: std::io::Write> std::io::Write for Chunked<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        write!(self.0, "{:x}\r\n", buf.len())?;
        self.0.write_all(buf)?;
        self.0.write_all(b"\r\n")?;
        self.0.flush()?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// A process's peak resident set (VmHWM), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn get_streams_a_large_body_to_a_file_as_it_arrives_with_bounded_memory() {
    const MIB: usize = 1024 * 1024;
    const SENT: usize = 96 * MIB;
    let (finish_tx, finish_rx) = std::sync::mpsc::channel();
    let (seen_tx, _seen_rx) = std::sync::mpsc::channel();
    let addr = http1_server(
        "200 OK",
        |out| {
            let chunk = vec![b'x'; 64 * 1024];
            for _ in 0..SENT / chunk.len() {
                out.write_all(&chunk)?;
            }
            Ok(())
        },
        finish_rx,
        seen_tx,
    );
    let dir = TempDir::new("get-stream");
    let file = dir.join("body");
    let mut child = Command::new(env!("CARGO_BIN_EXE_fastfallback"))
        .args([
            "get",
            &format!("http://127.0.0.1:{}/", addr.port()),
            "-o",
            &file,
        ])
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The whole body is in the file while the response has not ended: it was streamed, not
    // collected first.
    let start = std::time::Instant::now();
    while std::fs::metadata(&file).map_or(0, |m| m.len()) < SENT as u64 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "only {:?} bytes written",
            std::fs::metadata(&file).map(|m| m.len())
        );
        assert!(child.try_wait().unwrap().is_none(), "get ended early");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let peak = peak_rss_kib(child.id());
    finish_tx.send(()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(std::fs::metadata(&file).unwrap().len(), SENT as u64);
    // 96 MiB went through a process that never held more than a small part of it.
    assert!(
        peak < 48 * 1024,
        "peak RSS {peak} KiB for a {} MiB body",
        SENT / MIB
    );
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    assert!(
        stderr(&out).starts_with("200 OK over HTTP/1.1, on a new connection"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn get_writes_the_body_and_only_the_body_to_stdout_with_diagnostics_on_stderr() {
    let (finish_tx, finish_rx) = std::sync::mpsc::channel();
    let (seen_tx, seen_rx) = std::sync::mpsc::channel();
    finish_tx.send(()).unwrap();
    let addr = http1_server(
        "200 OK",
        |out| out.write_all(b"hello, body\n"),
        finish_rx,
        seen_tx,
    );
    let url = format!("http://u:hunter2-secret@127.0.0.1:{}/path?q=1", addr.port());
    let out = fastfallback_within(&["get", &url], LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(out.stdout, b"hello, body\n");
    let err = stderr(&out);
    assert!(err.contains("200 OK over HTTP/1.1"), "{err}");
    assert!(err.contains("(12 bytes)"), "{err}");
    let head = seen_rx.recv().unwrap();
    assert!(head.starts_with("GET /path?q=1 HTTP/1.1\r\n"), "{head}");
    assert!(
        !head.contains("hunter2") && !err.contains("hunter2"),
        "{head}{err}"
    );
}

#[test]
fn get_errors_hide_the_password_of_the_url() {
    let closed = closed_port();
    let url = format!("http://alice:hunter2-secret@127.0.0.1:{}/", closed.port());
    let out = fastfallback_within(&["get", &url], LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.starts_with(&format!(
            "fastfallback: http://alice:***@127.0.0.1:{}/: ",
            closed.port()
        )),
        "{err}"
    );
    assert!(
        !err.contains("hunter2") && !stdout(&out).contains("hunter2"),
        "{err}"
    );
}

#[test]
fn invalid_origins_and_urls_exit_2_without_their_password() {
    for args in [
        &["connect", "tcp://u:hunter2-secret@bad host:1"][..],
        &["connect", "tcp://u:hunter2-secret@bad host:1", "--json"],
        &["connect", "https://u:hunter2@x.test:99999"],
        &["get", "http://u:hunter2-secret@bad host/"],
        &["get", "tcp://u:hunter2-secret@localhost:1"],
        &["get", "not a url"],
        &["connect", "localhost:1", "--proxy", "http://alice:hunter2"],
        &[
            "get",
            "http://localhost:1/",
            "--proxy",
            "http://alice:hunter2",
        ],
    ] {
        let out = fastfallback_within(args, LIMIT);
        let (o, e) = (stdout(&out), stderr(&out));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {o}{e}");
        assert!(
            !o.contains("hunter2") && !e.contains("hunter2"),
            "{args:?}: {o}{e}"
        );
        assert!(
            e.contains("invalid") || e.contains("bad --proxy URL"),
            "{args:?}: {e}"
        );
    }
}

/// A one-request server answering `status` with `body`, and what it received.
fn answering(
    status: &'static str,
    body: &'static [u8],
) -> (SocketAddr, std::sync::mpsc::Receiver<String>) {
    let (finish_tx, finish_rx) = std::sync::mpsc::channel();
    let (seen_tx, seen_rx) = std::sync::mpsc::channel();
    finish_tx.send(()).unwrap();
    let addr = http1_server(status, move |out| out.write_all(body), finish_rx, seen_tx);
    (addr, seen_rx)
}

#[test]
fn get_sends_the_method_headers_and_data_given() {
    let (addr, seen) = answering("201 Created", b"made");
    let url = format!("http://127.0.0.1:{}/items", addr.port());
    let out = fastfallback_within(
        &[
            "get",
            &url,
            "-X",
            "PUT",
            "-H",
            "X-Test: one two",
            "-H",
            "accept:text/plain",
            "-d",
            "payload=1",
        ],
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(out.stdout, b"made");
    let request = seen.recv().unwrap().to_ascii_lowercase();
    assert!(request.starts_with("put /items http/1.1\r\n"), "{request}");
    assert!(request.contains("\r\nx-test: one two\r\n"), "{request}");
    assert!(request.contains("\r\naccept: text/plain\r\n"), "{request}");
    assert!(request.ends_with("\r\n\r\npayload=1"), "{request}");

    // -d alone makes a POST.
    let (addr, seen) = answering("200 OK", b"");
    let url = format!("http://127.0.0.1:{}/", addr.port());
    let out = fastfallback_within(&["get", &url, "-d", "x"], LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(seen.recv().unwrap().starts_with("POST / HTTP/1.1\r\n"));

    for bad in [
        &["-X", "BAD METHOD"][..],
        &["-H", "no colon"],
        &["-H", "bad name: x"],
    ] {
        let mut args = vec!["get", url.as_str()];
        args.extend_from_slice(bad);
        let out = fastfallback_within(&args, LIMIT);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", stderr(&out));
    }
}

#[test]
fn get_fail_exits_1_on_an_error_status_without_writing_the_body() {
    let (addr, _seen) = answering("404 Not Found", b"the error page");
    let url = format!("http://127.0.0.1:{}/missing", addr.port());
    let out = fastfallback_within(&["get", &url, "--fail"], LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("the server answered 404 Not Found"),
        "{}",
        stderr(&out)
    );
    // Without --fail, a 404 is a response like any other.
    let (addr, _seen) = answering("404 Not Found", b"the error page");
    let url = format!("http://127.0.0.1:{}/missing", addr.port());
    let out = fastfallback_within(&["get", &url], LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(out.stdout, b"the error page");
}

#[test]
fn get_json_prints_one_object_describing_the_exchange() {
    let (addr, _seen) = answering("200 OK", b"0123456789");
    let url = format!("http://u:hunter2@127.0.0.1:{}/", addr.port());
    let out = fastfallback_within(&["get", &url, "--json"], LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["url"],
        format!("http://u:***@127.0.0.1:{}/", addr.port())
    );
    assert_eq!(json["status"], 200);
    assert_eq!(json["protocol"], "HTTP/1.1");
    assert_eq!(json["source"], "new");
    assert_eq!(json["bytes"], 10);
    assert!(json["total_ms"].as_f64().unwrap() >= json["first_byte_ms"].as_f64().unwrap());
    assert_eq!(json["report"]["winner"], 1);
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
}

/// `quic.test` on 127.0.0.1 through a DNS server on loopback (`1 . alpn=h3,h2`), an HTTPS
/// server (h2) on a TCP port and an HTTP/3 server on the same UDP port; the CA file.
struct QuicOrigin {
    port: u16,
    dns: fastfallback_testnet::LoopbackDns,
    ca: PathBuf,
    _quic: quinn::Endpoint,
    _runtime: tokio::runtime::Runtime,
}

impl QuicOrigin {
    fn start(test: &str) -> Self {
        use fastfallback_testnet::{DnsZone, HttpsSpec};
        let (tls, ca, runtime) = server_set_up(test, "quic.test");
        let (port, quic) = runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let options = HttpOptions {
                tls: Some(tls.with_alpn(&[b"h2".to_vec()])),
                ..HttpOptions::default()
            };
            serve(listener, options);
            let config = tls.quic_server(&[b"h3".to_vec()], false).unwrap();
            let at = SocketAddr::from(([127, 0, 0, 1], port));
            let endpoint = quinn::Endpoint::server(config, at).unwrap();
            fastfallback_testnet::http3::serve(endpoint.clone());
            (port, endpoint)
        });
        let dns = fastfallback_testnet::LoopbackDns::start().unwrap();
        dns.set_dns(
            "quic.test",
            DnsZone {
                a: vec![std::net::Ipv4Addr::LOCALHOST],
                https: vec![HttpsSpec::service(1).alpn(["h3", "h2"])],
                ..DnsZone::default()
            },
        );
        Self {
            port,
            dns,
            ca,
            _quic: quic,
            _runtime: runtime,
        }
    }

    fn args(&self) -> Vec<String> {
        vec![
            format!("https://quic.test:{}", self.port),
            "--dns".into(),
            self.dns.addr().to_string(),
            "--ca".into(),
            self.ca.to_str().unwrap().into(),
            "--policy".into(),
            "quic=true".into(),
        ]
    }
}

impl Drop for QuicOrigin {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.ca);
    }
}

#[test]
fn connect_races_quic_and_draws_its_attempt_and_the_json_names_its_transport() {
    let origin = QuicOrigin::start("quic");
    let args = origin.args();
    let mut argv: Vec<&str> = vec!["connect"];
    argv.extend(args.iter().map(String::as_str));
    let out = fastfallback(&argv);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains("won by #1"), "{text}");
    assert!(text.contains("#1 v4 quic 127.0.0.1:"), "{text}");
    assert!(text.contains("▓ quic"), "{text}");
    assert!(text.contains(", ALPN h3"), "{text}");
    assert!(
        text.contains("+ quic "),
        "the timing line names the handshake\n{text}"
    );

    argv.push("--json");
    let out = fastfallback(&argv);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let report = &json["contacts"][0];
    assert_eq!(report["alpn"], "h3", "{report}");
    assert_eq!(report["attempts"][0]["transport"], "quic", "{report}");
    assert_eq!(report["winner"], report["attempts"][0]["id"], "{report}");
}

#[test]
fn get_goes_over_http3_when_quic_wins() {
    let origin = QuicOrigin::start("get-h3");
    let args = origin.args();
    let mut argv: Vec<&str> = vec!["get"];
    argv.extend(args.iter().map(String::as_str));
    let out = fastfallback(&argv);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stdout(&out));
    assert_eq!(
        text.lines().next(),
        Some("200 OK over HTTP/3, on a new connection"),
        "{text}"
    );
    assert_eq!(stdout(&out), "ok");
    assert!(text.contains(", ALPN h3"), "the race is drawn too\n{text}");
}

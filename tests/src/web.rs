//! The Moonkale shell in a browser (`moonkale-service web`) for tests and
//! benchmarks: a running `web` ([`Web`]), real Chromium at a phone's or a
//! desktop's size on its page ([`browser`]), raw requests to its gate.
//! Screenshots go to `$TMPDIR/moonkale-web-shots/`.

use std::path::PathBuf;
use std::process::Stdio;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::STEP;
use crate::vscode::Browser;
use crate::world::World;

pub const PHONE: (u32, u32) = (390, 844);
pub const DESKTOP: (u32, u32) = (1280, 800);

/// A running `moonkale-service web` for the world's workspace.
pub struct Web {
    child: tokio::process::Child,
    /// The URL it printed, with the login secret.
    pub url: String,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl Web {
    pub async fn start(w: &World) -> Web {
        let ws = w.sb.workspace.display().to_string();
        Web::start_with(w, &["--workspace", &ws]).await
    }

    pub async fn start_with(w: &World, args: &[&str]) -> Web {
        let mut all = vec!["web"];
        all.extend(args);
        let mut child = w
            .command(&all)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(
                std::fs::File::create(w.sb.root.join("web.log")).expect("web log"),
            ))
            .kill_on_drop(true)
            .spawn()
            .expect("start moonkale-service web");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let url = tokio::time::timeout(STEP, lines.next_line())
            .await
            .expect("web printed no URL in time")
            .expect("web's stdout")
            .expect("web exited before printing its URL");
        let addr = url
            .strip_prefix("http://")
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_else(|| panic!("not a URL: {url}"))
            .to_owned();
        assert!(url.contains("/?token="), "{url}");
        Web { child, url, addr }
    }

    /// Logs in with the secret of the URL as a browser does: the session
    /// cookie (`name=value`) the page's requests carry.
    pub async fn login(&self) -> String {
        let secret = self.url.split("token=").nth(1).expect("a secret");
        let host = format!("Host: {}\r\n", self.addr);
        let (status, login) = self.get(&format!("/?token={secret}"), &host).await;
        assert_eq!(status, 303, "{login}");
        assert!(login.contains("HttpOnly"), "{login}");
        login
            .lines()
            .find_map(|l| l.strip_prefix("Set-Cookie: "))
            .and_then(|c| c.split(';').next())
            .expect("a cookie")
            .to_owned()
    }

    /// The page's WebSocket, opened as the page opens it (cookie, own
    /// origin), for a test that plays a misbehaving page.
    pub async fn page_socket(
        &self,
    ) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>
    {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let cookie = self.login().await;
        let mut request = format!("ws://{}/ws", self.addr)
            .into_client_request()
            .expect("a request");
        let headers = request.headers_mut();
        headers.insert("Cookie", cookie.parse().unwrap());
        headers.insert("Origin", format!("http://{}", self.addr).parse().unwrap());
        let (ws, _) = tokio::time::timeout(STEP, tokio_tungstenite::connect_async(request))
            .await
            .expect("the page socket opened in time")
            .expect("the page socket");
        ws
    }

    /// The serving process's id (the bench reads its memory).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Ends `web` as Ctrl-C does, and waits until it exited.
    pub async fn stop(&mut self) {
        let pid = self.child.id().expect("web runs") as i32;
        // SAFETY: a signal to our own child, which has not been reaped.
        unsafe { libc::kill(pid, libc::SIGINT) };
        tokio::time::timeout(STEP, self.child.wait())
            .await
            .expect("web exited in time after Ctrl-C")
            .expect("web's exit");
    }

    /// One raw HTTP request: the status line and the whole answer.
    pub async fn get(&self, path: &str, headers: &str) -> (u16, String) {
        let mut tcp = tokio::net::TcpStream::connect(&self.addr)
            .await
            .expect("connect to web");
        let connection = if headers.contains("Upgrade:") {
            "Connection: Upgrade\r\n"
        } else {
            "Connection: close\r\n"
        };
        let request = format!("GET {path} HTTP/1.1\r\n{headers}{connection}\r\n");
        tcp.write_all(request.as_bytes()).await.unwrap();
        // Up to the end of the answer, or of its head for an upgrade (the
        // socket then stays open).
        let mut answer = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = tokio::time::timeout(STEP, tcp.read(&mut chunk))
                .await
                .expect("web answered in time")
                .expect("web's answer");
            answer.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&answer);
            if n == 0 || (text.starts_with("HTTP/1.1 101") && text.contains("\r\n\r\n")) {
                break;
            }
        }
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let status = answer
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("GET {path} with {headers:?}: no status: {answer:?}"));
        (status, answer)
    }
}

pub fn shots_dir() -> PathBuf {
    std::env::temp_dir().join("moonkale-web-shots")
}

pub async fn browser(w: &World, web: &Web, (width, height): (u32, u32)) -> Browser {
    let mut b = Browser::start(&w.sb);
    b.shots = shots_dir();
    let mobile = width < 600;
    b.run(json!({
        "op": "open",
        "url": web.url,
        "viewport": {"width": width, "height": height},
        "mobile": mobile,
    }))
    .await;
    // The page is live once the shell rendered its tabs.
    b.wait_for("nav.tabs").await;
    b
}

pub fn read(path: &std::path::Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// Resizes the page to `(width, height)` and writes its screenshot `name`
/// (the other size of a view a test walked through), checking that the
/// layout does not scroll sideways there.
pub async fn screenshot_at(b: &mut Browser, (width, height): (u32, u32), name: &str) {
    b.run(json!({"op": "viewport", "width": width, "height": height}))
        .await;
    no_sideways_scrolling(b, name).await;
    b.screenshot(name).await;
}

pub async fn no_sideways_scrolling(b: &mut Browser, view: &str) {
    let sideways = b.run(json!({"op": "scrollsSideways"})).await;
    assert_eq!(sideways, json!(false), "{view} scrolls sideways");
}

/// The page logged no console error, threw nothing and broke none of its
/// own Content-Security-Policy since it opened (or since the last check).
pub async fn no_page_problems(b: &mut Browser, view: &str) {
    let problems = b.run(json!({"op": "problems"})).await;
    assert_eq!(problems, json!([]), "{view}: the page's problems");
}

/// Waits until the page's address ends with `route` (its fragment, which
/// the page's script sets once the view rendered).
pub async fn wait_route(b: &mut Browser, route: &str) {
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let url = b.run(json!({"op": "url"})).await;
        if url.as_str().is_some_and(|u| u.ends_with(route)) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the page's address is {url}, not at {route}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};

use super::*;
use crate::sim::{SimConfig, SimServer};

const CHAT: &str = r#"{"model": "m", "stream": true, "stream_options": {"include_usage": true}, "messages": [{"role": "user", "content": "hi"}]}"#;

async fn post(base: &str, path: &str, body: &str) -> (StatusCode, Bytes) {
    post_with(base, path, body, &[]).await
}

async fn post_with(
    base: &str,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, Bytes) {
    let client = build_client(4);
    let mut req = Request::post(format!("{base}{path}"))
        .header("content-type", "application/json")
        .header("authorization", "Bearer sk-SECRET");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let req = req.body(Full::new(Bytes::from(body.to_string()))).unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status();
    (status, resp.into_body().collect().await.unwrap().to_bytes())
}

/// Every report, until the proxy has stopped and all were read.
fn drain(captures: &Captures) -> Vec<Captured> {
    let mut out = Vec::new();
    while let Some(batch) = captures.next(16, Duration::from_secs(5)) {
        out.extend(batch);
    }
    out
}

fn config(upstream: String) -> ProxyConfig {
    ProxyConfig {
        upstream,
        drain_s: 5.0,
        apis: [
            (Dialect::Chat, "/chat/completions".into()),
            (Dialect::Completions, "/completions".into()),
        ]
        .into(),
        session_header: Some("X-Session-Id".into()),
    }
}

#[tokio::test]
async fn forwards_streams_and_reports_both_ends() {
    let sim_config = SimConfig::from_json(
        r#"{"ttft_ms": 2, "tpot_ms": 1, "reasoning_tokens": [3, 3], "content_tokens": [5, 5], "seed": 1}"#,
    )
    .unwrap();
    let sim = SimServer::start(sim_config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let upstream = format!("http://{}", sim.local_addr());
    let (proxy, rx) = ProxyServer::start(config(upstream), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let base = format!("http://{}", proxy.local_addr());
    let (status, body) = post(&base, "/v1/chat/completions?x=1", CHAT).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.ends_with(b"data: [DONE]\n\n"));
    let (status, _) = post_with(
        &base,
        "/v1/chat/completions",
        CHAT,
        &[("x-session-id", " conv-7 ")],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    proxy.shutdown().await;
    sim.shutdown().await;

    let mut events = drain(&rx);
    assert_eq!(events.len(), 4, "{events:?}");
    // The one request header reported: the session's (any case, trimmed).
    let Captured::Request(second) = &events[2] else {
        panic!("{events:?}")
    };
    assert_eq!(second.session.as_deref(), Some("conv-7"));
    events.truncate(2);
    let Captured::Request(req) = &events[0] else {
        panic!("{events:?}")
    };
    let Captured::Response(resp) = &events[1] else {
        panic!("{events:?}")
    };
    assert_eq!(
        (req.method.as_str(), req.path.as_str(), req.api),
        ("POST", "/v1/chat/completions", Some(Dialect::Chat))
    );
    assert_eq!(req.body, CHAT.as_bytes());
    assert_eq!(req.session, None);
    assert_eq!(
        (resp.seq, resp.status, resp.error.as_deref()),
        (req.seq, 200, None)
    );
    let ttfb = resp.ttfb_us.unwrap();
    assert!(0 < ttfb && ttfb <= resp.end_us);
    // Decoded beside the forwarding: what the client got, counted.
    let direct =
        crate::decode::summary::summarize(Dialect::Chat, &body, "text/event-stream").unwrap();
    assert_eq!(resp.usage, direct.usage);
    assert_eq!(resp.usage.completion_tokens, Some(8));
    assert_eq!(resp.finish_reason.as_deref(), Some("stop"));
    // The answer the client got (reasoning left out), for finding the next turn.
    assert_eq!(resp.answer.as_deref(), Some(direct.answer.as_str()));
    assert_eq!(
        resp.answer.as_deref().unwrap().split_whitespace().count(),
        5
    );
    // The reader ends once the proxy has stopped.
    assert!(rx.next(1, Duration::from_millis(100)).is_none());
}

#[tokio::test]
async fn unreachable_upstream_is_a_502_and_reported() {
    let (proxy, rx) = ProxyServer::start(
        config("http://127.0.0.1:9".into()),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let base = format!("http://{}", proxy.local_addr());
    let (status, body) = post(&base, "/v1/completions", r#"{"prompt": "x"}"#).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert!(String::from_utf8_lossy(&body).contains("upstream unreachable"));
    proxy.shutdown().await;
    let events = drain(&rx);
    let Captured::Response(resp) = &events[1] else {
        panic!("{events:?}")
    };
    assert_eq!(resp.status, 502);
    assert!(resp.error.as_deref().unwrap().contains("unreachable"));
}

/// Reads one HTTP/1.1 request (head and Content-Length body) from `sock`;
/// false when the peer closed first.
async fn read_request(sock: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if buf.len() >= end + 4 + length {
                return true;
            }
        }
        match sock.read(&mut chunk).await.unwrap() {
            0 => return false,
            n => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

#[tokio::test]
async fn a_pooled_connection_the_upstream_closed_unanswered_is_retried_on_a_fresh_one() {
    use tokio::io::AsyncWriteExt;
    // The first connection answers one request with keep-alive, then reads
    // the next and closes without a byte of answer (llama.cpp's server does
    // this after every stream); the second connection answers.
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = upstream.local_addr().unwrap();
    let server = tokio::spawn(async move {
        const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nkeep-alive: timeout=5\r\n\r\n{}";
        let mut requests = 0;
        let (mut first, _) = upstream.accept().await.unwrap();
        assert!(read_request(&mut first).await);
        first.write_all(OK).await.unwrap();
        requests += 1;
        if read_request(&mut first).await {
            requests += 1;
        }
        drop(first);
        let (mut second, _) = upstream.accept().await.unwrap();
        assert!(read_request(&mut second).await);
        second.write_all(OK).await.unwrap();
        requests + 1
    });
    let (proxy, _rx) = ProxyServer::start(
        config(format!("http://{addr}")),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let base = format!("http://{}", proxy.local_addr());
    for _ in 0..2 {
        let (status, body) = post(&base, "/v1/completions", r#"{"prompt": "x"}"#).await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        assert_eq!(&body[..], b"{}");
    }
    proxy.shutdown().await;
    // Three requests reached the upstream: the second one twice.
    assert_eq!(server.await.unwrap(), 3);
}

#[test]
fn a_request_is_an_api_by_method_and_the_longest_path_end() {
    let shared = Shared {
        base: String::new(),
        session_header: None,
        routes: config(String::new()).routes(),
        client: build_client(1),
        events: mpsc::channel().0,
        next_seq: AtomicU64::new(1),
        stopping: AtomicBool::new(false),
    };
    let api = |method: Method, path: &str| shared.api_of(&method, path);
    assert_eq!(
        api(Method::POST, "/v1/chat/completions"),
        Some(Dialect::Chat)
    );
    assert_eq!(
        api(Method::POST, "/openai/deployments/gpt/chat/completions/"),
        Some(Dialect::Chat)
    );
    assert_eq!(
        api(Method::POST, "/v1/completions"),
        Some(Dialect::Completions)
    );
    assert_eq!(api(Method::GET, "/v1/chat/completions"), None);
    assert_eq!(api(Method::POST, "/v1/messages"), None);
}

#[test]
fn config_errors_name_the_field() {
    let mut bad = config("http://h".into());
    bad.drain_s = -1.0;
    assert!(bad.validate().unwrap_err().to_string().contains("drain_s"));
    let mut bad = config("http://h".into());
    bad.apis.insert(Dialect::Anthropic, "messages".into());
    assert!(bad
        .validate()
        .unwrap_err()
        .to_string()
        .contains("apis.anthropic"));
    for (name, why) in [
        ("Authorization", "carries a secret"),
        ("x-api-key", "carries a secret"),
        ("bad header", "is not a header name"),
    ] {
        let mut bad = config("http://h".into());
        bad.session_header = Some(name.into());
        let message = bad.validate().unwrap_err().to_string();
        assert!(
            message.contains("session_header") && message.contains(why),
            "{message}"
        );
    }
}

#[test]
fn upstream_must_be_http() {
    assert!(check_upstream("ftp://h").is_err());
    assert!(check_upstream("h:8000").is_err());
    assert_eq!(check_upstream("https://h/p/").unwrap(), "https://h/p");
}

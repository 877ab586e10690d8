use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};

use super::*;
use crate::sim::{SimConfig, SimServer};

const CHAT: &str =
    r#"{"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]}"#;

async fn post(base: &str, path: &str, body: &str) -> (StatusCode, Bytes) {
    let client = build_client(StampingConnector::new(), 4, false);
    let req = Request::post(format!("{base}{path}"))
        .header("content-type", "application/json")
        .header("authorization", "Bearer sk-SECRET")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status();
    (status, resp.into_body().collect().await.unwrap().to_bytes())
}

fn drain(rx: &mpsc::Receiver<ProxyEvent>) -> Vec<ProxyEvent> {
    let mut out = Vec::new();
    while let Ok(ev) = rx.recv_timeout(Duration::from_secs(5)) {
        out.push(ev);
    }
    out
}

fn config(upstream: String) -> ProxyConfig {
    ProxyConfig {
        upstream,
        drain: Duration::from_secs(5),
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
    proxy.shutdown().await;
    sim.shutdown().await;

    let events = drain(&rx);
    assert_eq!(events.len(), 2, "{events:?}");
    let ProxyEvent::Request(req) = &events[0] else {
        panic!("{events:?}")
    };
    let ProxyEvent::Response(resp) = &events[1] else {
        panic!("{events:?}")
    };
    assert_eq!(
        (req.method.as_str(), req.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(req.body, CHAT.as_bytes());
    assert_eq!(
        (resp.seq, resp.status, resp.error.as_deref()),
        (req.seq, 200, None)
    );
    assert!(resp.content_type.starts_with("text/event-stream"));
    let ttfb = resp.ttfb_us.unwrap();
    assert!(0 < ttfb && ttfb <= resp.end_us);
    assert_eq!(resp.body.concat(), body.to_vec());
    // The channel closes once the proxy has stopped.
    assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
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
    let ProxyEvent::Response(resp) = &events[1] else {
        panic!("{events:?}")
    };
    assert_eq!(resp.status, 502);
    assert!(resp.error.as_deref().unwrap().contains("unreachable"));
}

#[test]
fn upstream_must_be_http() {
    assert!(check_upstream("ftp://h").is_err());
    assert!(check_upstream("h:8000").is_err());
    assert_eq!(check_upstream("https://h/p/").unwrap(), "https://h/p");
}

//! The engine against a server that closes every connection after one
//! streamed response, as llama.cpp's (cpp-httplib) does: after the last
//! chunk, a FIN, up to 100 ms of reading what still comes, then the close.
//! Each request that reuses such a connection races its close; none may be
//! lost. `CLOSING_N=20000` makes it a stress run (the default keeps it quick).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::Duration;

use specreplay_core::engine::{self, LoadMode, PreparedRequest, RunSpec};

mod common;
use common::drain;

fn read_request(sock: &mut TcpStream) -> bool {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if buf.len() >= end + 4 + len {
                return true;
            }
        }
        match sock.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn serve(mut sock: TcpStream) {
    sock.set_nodelay(true).unwrap();
    if !read_request(&mut sock) {
        return;
    }
    let _ = sock.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nKeep-Alive: timeout=5, max=100\r\nTransfer-Encoding: chunked\r\n\r\n",
    );
    for i in 0..20 {
        let event = format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"t{i}\"}}}}]}}\n\n"
        );
        let _ = sock.write_all(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes());
    }
    let last = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":20}}\n\ndata: [DONE]\n\n";
    let _ = sock.write_all(format!("{:x}\r\n{last}\r\n0\r\n\r\n", last.len()).as_bytes());
    // cpp-httplib's drain_and_close_socket: FIN, read what comes for up to
    // 100 ms, close.
    let _ = sock.shutdown(Shutdown::Write);
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut sink = [0u8; 4096];
    while matches!(sock.read(&mut sink), Ok(n) if n > 0) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_closes_after_every_stream_loses_no_request() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for sock in listener.incoming().flatten() {
            std::thread::spawn(move || serve(sock));
        }
    });
    let url = format!("http://{addr}/v1/chat/completions");
    let n: usize = std::env::var("CLOSING_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let requests: Vec<_> = (0..n)
        .map(|i| {
            let body = serde_json::json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "q"}]});
            PreparedRequest::new(format!("r{i}"), "chat", &url, body.to_string().into_bytes(), 0.0).unwrap()
        })
        .collect();
    let spec = RunSpec {
        headers: vec![],
        load: LoadMode::Concurrency { concurrency: 2 },
        num_requests: Some(n as u64),
        duration_s: None,
        max_concurrency: None,
        warmup: 0,
        timeout_s: Some(5.0),
        stall_timeout_s: None,
        retries: 0,
        seed: 1,
        server_stamps: false,
        chunk_text: false,
        preconnect: None,
        sessions: engine::SessionMode::Dependent,
        live_history: false,
        start_at_us: None,
        share: None,
    };
    let run = engine::start(spec, requests, &tokio::runtime::Handle::current()).unwrap();
    let records = drain(run).await;
    assert_eq!(records.len(), n);
    let failed: Vec<_> = records
        .iter()
        .filter(|r| r.error.is_some())
        .map(|r| (r.request_index, &r.error))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {n} failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
}

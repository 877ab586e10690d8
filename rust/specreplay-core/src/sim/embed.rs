//! The non-generating endpoints: `/v1/embeddings` (OpenAI's shape),
//! `/v1/rerank` (the Cohere/Jina shape vLLM serves, also at `/rerank` and
//! `/v2/rerank`) and `/v1/score` (vLLM's). Each answers one JSON document
//! after a prefill of all its input tokens (`ttft_ms` + `prefill_us_per_token`
//! per token, the answering model's), so latency grows with the inputs and
//! the batch: pooling forwards run one after another on the server's
//! pool lane (`pool_lane.rs`: a batch of pooling requests costs the sum of their
//! prefills), and under the capacity model each also waits one decode step
//! of the running batch (see "Pooling endpoints" in docs/simulator.md).
//! Vectors and scores are deterministic in the text. The faults that need no
//! model output (error statuses, resets, slow headers, HTML) apply.

use std::sync::Arc;
use std::time::Instant;

use base64::Engine;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

use super::config::{Capacity, SimConfig};
use super::fault::ConnControl;
use super::generate::{answer_early, bad_request, model_not_found, pick_fault, read_request};
use super::hash::Fnv1a;
use super::http::{json, shutting_down, SimBody};
use super::shared::Shared;

/// Which of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    Embeddings,
    Rerank,
    Score,
}

/// One answer before its deadline.
struct Pooled {
    model: Option<String>,
    input_tokens: u32,
    body: Value,
}

pub(super) async fn pool(
    shared: &Shared,
    control: &Arc<ConnControl>,
    kind: Pooling,
    req: Request<Incoming>,
    arrived: Instant,
) -> Response<SimBody> {
    let (forced, body) = match read_request(shared, req).await {
        Ok(read) => read,
        Err(bad) => return bad,
    };
    let parsed = serde_json::from_slice::<Value>(&body)
        .map_err(|e| format!("invalid JSON body: {e}"))
        .and_then(|v| answer(shared, kind, &v));
    let mut pooled = match parsed {
        Ok(pooled) => pooled,
        Err(msg) => return bad_request(shared, &msg),
    };
    let Some(served) = shared.served(pooled.model.as_deref()) else {
        return model_not_found(shared, pooled.model.as_deref());
    };
    let n = shared
        .next_id
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let fault = pick_fault(shared, n, forced);
    let arrived = match answer_early(shared, control, fault, arrived).await {
        Ok(arrived) => arrived,
        Err(answered) => return answered,
    };
    let ready = arrived + served.config.frontend_delay();
    let running = shared.exporter.running().get().max(0) as usize;
    let compute_us = compute_us(
        &served.config,
        shared.config.capacity.as_ref(),
        running,
        pooled.input_tokens,
    );
    let due = shared.pool_lane.book(ready, compute_us);
    tokio::select! {
        _ = tokio::time::sleep_until(due.into()) => {}
        _ = shared.shutdown_signal() => return shutting_down(),
    }
    pooled.body["model"] = (&*served.name).into();
    pooled.body["id"] = format!("pool-sim-{n}").into();
    pooled.body["created"] = shared.created.into();
    let bytes = serde_json::to_vec(&pooled.body).expect("serializing into memory cannot fail");
    json(StatusCode::OK, bytes)
}

/// The forward of a pooling request of `input_tokens`: their prefill, and
/// under the capacity model one decode step of the `running` batch (the
/// iteration it shares with them, as a prefill does in `engine`).
fn compute_us(
    config: &SimConfig,
    capacity: Option<&Capacity>,
    running: usize,
    input_tokens: u32,
) -> u64 {
    let batch_us = capacity.map_or(0, |c| c.decode_step_us(config.step_us(), running));
    config.prefill_compute_us(input_tokens) + batch_us
}

fn answer(shared: &Shared, kind: Pooling, v: &Value) -> Result<Pooled, String> {
    let model = match v.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err("'model' must be a string".to_string()),
    };
    let (input_tokens, body) = match kind {
        Pooling::Embeddings => embeddings(shared, v)?,
        Pooling::Rerank => rerank(v)?,
        Pooling::Score => score(v)?,
    };
    Ok(Pooled {
        model,
        input_tokens,
        body,
    })
}

/// Tokens of a text: its words (the simulator's prompt rule).
fn words(text: &str) -> u32 {
    text.split_whitespace().count() as u32
}

fn hash_of(parts: &[&str]) -> u64 {
    let mut h = Fnv1a::new();
    for part in parts {
        h.write(part.as_bytes());
    }
    h.finish()
}

/// `input`: a string, a list of strings, a list of token ids, or a list of
/// such lists. Each item's tokens and name.
fn embedding_inputs(input: &Value) -> Result<Vec<(u32, u64)>, String> {
    let ids = |items: &[Value]| items.iter().all(Value::is_u64) && !items.is_empty();
    let item = |v: &Value| -> Result<(u32, u64), String> {
        match v {
            Value::String(s) => Ok((words(s), hash_of(&[s]))),
            Value::Array(items) if ids(items) => {
                Ok((items.len() as u32, hash_of(&[&v.to_string()])))
            }
            _ => Err("'input' items must be strings or lists of token ids".to_string()),
        }
    };
    match input {
        Value::String(_) => Ok(vec![item(input)?]),
        Value::Array(items) if ids(items) => Ok(vec![item(input)?]),
        Value::Array(items) if !items.is_empty() => items.iter().map(item).collect(),
        _ => Err("'input' must be a string or a non-empty list".to_string()),
    }
}

fn embeddings(shared: &Shared, v: &Value) -> Result<(u32, Value), String> {
    let inputs = embedding_inputs(v.get("input").ok_or("'input' is required")?)?;
    let dim = match v.get("dimensions").filter(|d| !d.is_null()) {
        None => shared.config.embedding_dim,
        Some(d) => d
            .as_u64()
            .filter(|&d| (1..=u64::from(shared.config.embedding_dim)).contains(&d))
            .ok_or_else(|| {
                format!(
                    "'dimensions' must be an integer in [1, {}]",
                    shared.config.embedding_dim
                )
            })? as u32,
    };
    let base64 = match v.get("encoding_format").and_then(Value::as_str) {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(format!(
                "'encoding_format' '{other}' is not float or base64"
            ))
        }
    };
    let tokens: u32 = inputs.iter().map(|(t, _)| t).sum();
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, &(_, name))| {
            let vector = unit_vector(name, dim);
            let embedding = if base64 {
                let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
                base64::engine::general_purpose::STANDARD
                    .encode(bytes)
                    .into()
            } else {
                json!(vector)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    let body = json!({"object": "list", "data": data,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens}});
    Ok((tokens, body))
}

/// A unit-length vector named by `name`.
fn unit_vector(name: u64, dim: u32) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(name);
    let v: Vec<f32> = (0..dim).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let norm = v
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt()
        .max(f32::MIN_POSITIVE);
    v.into_iter().map(|x| x / norm).collect()
}

/// A relevance in `[0, 1)` for the pair.
fn relevance(query: &str, doc: &str) -> f64 {
    ChaCha8Rng::seed_from_u64(hash_of(&[query, doc])).random()
}

fn texts(v: &Value, key: &str) -> Result<Vec<String>, String> {
    let one = |d: &Value| match d {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("text").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    };
    match v.get(key) {
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|d| {
                one(d).ok_or_else(|| format!("'{key}' items must be strings or {{\"text\": …}}"))
            })
            .collect(),
        _ => Err(format!("'{key}' must be a string or a non-empty list")),
    }
}

fn rerank(v: &Value) -> Result<(u32, Value), String> {
    let query = v
        .get("query")
        .and_then(Value::as_str)
        .ok_or("'query' must be a string")?;
    let documents = texts(v, "documents")?;
    let top_n = match v.get("top_n").filter(|t| !t.is_null()) {
        None => documents.len(),
        Some(t) => t.as_u64().ok_or("'top_n' must be a non-negative integer")? as usize,
    };
    let return_documents = v
        .get("return_documents")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    // A cross-encoder reads the query with each document.
    let tokens: u32 = documents.iter().map(|d| words(query) + words(d)).sum();
    let mut results: Vec<(usize, f64)> = documents
        .iter()
        .enumerate()
        .map(|(i, d)| (i, relevance(query, d)))
        .collect();
    results.sort_by(|a, b| b.1.total_cmp(&a.1));
    results.truncate(top_n);
    let results: Vec<Value> = results
        .into_iter()
        .map(|(index, score)| {
            let mut r = json!({"index": index, "relevance_score": score});
            if return_documents {
                r["document"] = json!({"text": documents[index]});
            }
            r
        })
        .collect();
    Ok((
        tokens,
        json!({"results": results, "usage": {"total_tokens": tokens}}),
    ))
}

fn score(v: &Value) -> Result<(u32, Value), String> {
    let (left, right) = (texts(v, "text_1")?, texts(v, "text_2")?);
    let pairs: Vec<(&String, &String)> = match (left.len(), right.len()) {
        (1, _) => right.iter().map(|r| (&left[0], r)).collect(),
        (l, r) if l == r => left.iter().zip(&right).collect(),
        (l, r) => return Err(format!("'text_1' ({l}) and 'text_2' ({r}) must pair up")),
    };
    let tokens: u32 = pairs.iter().map(|(a, b)| words(a) + words(b)).sum();
    let data: Vec<Value> = pairs
        .iter()
        .enumerate()
        .map(|(index, (a, b))| json!({"index": index, "object": "score", "score": relevance(a, b)}))
        .collect();
    let body = json!({"object": "list", "data": data,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens}});
    Ok((tokens, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_batch_slows_a_pooling_forward() {
        let config = SimConfig {
            tpot_ms: 10.0,
            prefill_us_per_token: 100.0,
            ..SimConfig::default()
        };
        let capacity = Capacity {
            batch_step_cost: 0.1,
            ..Capacity::default()
        };
        // Without the capacity model: the prefill only.
        assert_eq!(compute_us(&config, None, 8, 50), 5_000);
        // With it: plus one step of the batch, which grows with it.
        assert_eq!(compute_us(&config, Some(&capacity), 0, 50), 5_000);
        assert_eq!(compute_us(&config, Some(&capacity), 1, 50), 15_000);
        assert_eq!(compute_us(&config, Some(&capacity), 8, 50), 5_000 + 17_000);
    }
}

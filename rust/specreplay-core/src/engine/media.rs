//! Stored media put into request bodies. A trace keeps each image or clip
//! once, in a file beside it (`TRACE.media/<sha256>.<ext>`); the Python layer
//! leaves an empty JSON string where its data goes and names the file
//! (`media_at`), and the data is written here, base64, as the body is built:
//! the feeding thread never serializes an image per request, and each file
//! is read and encoded once while it is among the last used.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

use base64::Engine as _;

use crate::error::CoreError;

/// One place in a body: `prefix` (a data URI's `data:image/png;base64,`,
/// or nothing) then the file's bytes in base64, between the quotes at `at`.
#[derive(Debug, Clone, PartialEq)]
pub struct MediaSlot {
    pub at: usize,
    pub file: String,
    pub prefix: String,
}

/// Most base64 text kept: a session's image, or one shared by a whole
/// trace, is encoded once; a trace of distinct images is not held whole.
const CACHE_CHARS: usize = 256 << 20;

#[derive(Default)]
struct Cache {
    encoded: HashMap<String, Arc<str>>,
    order: VecDeque<String>,
    chars: usize,
}

fn cache() -> &'static Mutex<Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

/// The file's bytes in base64 (read once while cached).
pub fn encoded(file: &str) -> Result<Arc<str>, CoreError> {
    if let Some(hit) = cache().lock().expect("media cache").encoded.get(file) {
        return Ok(hit.clone());
    }
    let bytes = std::fs::read(file).map_err(|e| {
        CoreError::config(
            "media_at",
            format!("{file}: {e} (stored media live beside the trace, in TRACE.media/)"),
        )
    })?;
    let text: Arc<str> = base64::engine::general_purpose::STANDARD
        .encode(bytes)
        .into();
    let mut c = cache().lock().expect("media cache");
    if c.encoded.insert(file.to_string(), text.clone()).is_none() {
        c.order.push_back(file.to_string());
        c.chars += text.len();
    }
    while c.chars > CACHE_CHARS && c.order.len() > 1 {
        if let Some(old) = c.order.pop_front() {
            if let Some(dropped) = c.encoded.remove(&old) {
                c.chars -= dropped.len();
            }
        }
    }
    Ok(text)
}

/// Per slot, ascending by place: where it was in the body and the bytes it added.
pub type Added = Vec<(usize, usize)>;

/// `body` with every slot's data written, and the bytes each slot added
/// (by its place in `body`, ascending), to move later offsets by.
pub fn with_media(body: &[u8], slots: &[MediaSlot]) -> Result<(Vec<u8>, Added), CoreError> {
    let data: Vec<Arc<str>> = slots
        .iter()
        .map(|s| encoded(&s.file))
        .collect::<Result<_, _>>()?;
    // The prefix then the data at one place (a stable sort keeps them in order).
    let mut texts: Vec<(usize, &str)> = Vec::with_capacity(2 * slots.len());
    for (slot, text) in slots.iter().zip(&data) {
        texts.push((slot.at, slot.prefix.as_str()));
        texts.push((slot.at, text));
    }
    let out = super::body::insert_all(body, &mut texts, "media_at")?;
    let mut added: Added = slots
        .iter()
        .zip(&data)
        .map(|(s, d)| (s.at, s.prefix.len() + d.len()))
        .collect();
    added.sort_unstable();
    Ok((out, added))
}

/// `at` (an offset in the body before the media went in) in the body after.
pub fn moved(at: usize, added: &[(usize, usize)]) -> usize {
    at + added
        .iter()
        .filter(|(p, _)| *p < at)
        .map(|(_, n)| n)
        .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_goes_between_the_quotes_and_later_offsets_move() {
        let dir = std::env::temp_dir().join(format!("specreplay-media-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("x.png");
        std::fs::write(&file, b"\x89PNG-bytes").unwrap();
        let body = br#"{"a":"","b":"","c":""}"#;
        let slot = |at: usize, prefix: &str| MediaSlot {
            at,
            file: file.to_string_lossy().into_owned(),
            prefix: prefix.into(),
        };
        let (out, added) =
            with_media(body, &[slot(13, ""), slot(6, "data:image/png;base64,")]).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let b64 = base64::engine::general_purpose::STANDARD.encode(b"\x89PNG-bytes");
        assert_eq!(v["a"], format!("data:image/png;base64,{b64}"));
        assert_eq!(v["b"], b64);
        // "c"'s slot, after both.
        let c = moved(20, &added);
        assert_eq!((out[c - 1], out[c]), (b'"', b'"'));
        assert_eq!(moved(3, &added), 3);
        let missing = with_media(
            body,
            &[MediaSlot {
                at: 6,
                file: "/nonexistent/m.png".into(),
                prefix: String::new(),
            }],
        );
        assert!(missing
            .unwrap_err()
            .to_string()
            .contains("/nonexistent/m.png"));
    }
}

//! What images, audio and video cost in prompt tokens.
//!
//! Images: a patch rule like Qwen2-VL's vision encoder (14-pixel patches,
//! 2×2 of them merged into one token): `ceil(w/14)·ceil(h/14) / 2²`. The
//! size is read from the data URI's header bytes (PNG, JPEG, GIF, WebP); an
//! http(s) URL is never fetched and counts as `image_url_size`. Audio: a
//! rate per second of clip (WAV's length from its header; MP3's from its
//! size at 128 kbit/s). Video: a fixed count per clip (never decoded).

use base64::Engine;

use crate::sim::hash::Fnv1a;

/// Most decoded bytes looked at for a header (a JPEG's size can follow
/// large EXIF and ICC segments).
const HEADER_BYTES: usize = 512 << 10;

/// MP3's assumed bit rate: its length is not in a header.
const MP3_BITS_PER_S: f64 = 128_000.0;

/// The media rule, from the config's `image_*`, `audio_*`, `video_*` keys.
#[derive(Clone, Debug, PartialEq)]
pub struct MediaRule {
    pub patch_px: u32,
    pub merge: u32,
    pub url_size: [u32; 2],
    pub audio_tokens_per_s: f64,
    pub video_tokens: u32,
}

impl Default for MediaRule {
    fn default() -> Self {
        MediaRule {
            patch_px: 14,
            merge: 2,
            url_size: [1024, 1024],
            audio_tokens_per_s: 25.0,
            video_tokens: 1024,
        }
    }
}

impl MediaRule {
    /// Tokens of a `width`×`height` image (at least 1).
    pub fn image_tokens(&self, width: u32, height: u32) -> u32 {
        let patch = u64::from(self.patch_px.max(1));
        let patches = u64::from(width).div_ceil(patch) * u64::from(height).div_ceil(patch);
        let merged = patches.div_ceil(u64::from(self.merge.max(1)).pow(2));
        u32::try_from(merged).unwrap_or(u32::MAX).max(1)
    }

    /// An image's tokens and its name (a hash of its bytes or URL).
    pub fn image_url(&self, url: &str) -> Result<(u32, u64), String> {
        if let Some(rest) = url.strip_prefix("data:") {
            let (meta, data) = rest
                .split_once(',')
                .ok_or("an image data URI needs a ',' before its data")?;
            if !meta.ends_with(";base64") {
                return Err(format!("image data URI '{meta}' is not base64"));
            }
            // Most headers sit in the first bytes; a JPEG's frame may follow
            // large EXIF and ICC segments.
            let mut size = image_size(&decode_prefix(data, 4096)?);
            if size.is_none() {
                size = image_size(&decode_prefix(data, HEADER_BYTES)?);
            }
            let [w, h] = size.ok_or_else(|| {
                format!(
                    "cannot read the size of the '{meta}' image (PNG, JPEG, GIF and WebP are read)"
                )
            })?;
            Ok((self.image_tokens(w, h), name_of(data)))
        } else if url.starts_with("http://") || url.starts_with("https://") {
            let [w, h] = self.url_size;
            Ok((self.image_tokens(w, h), name_of(url)))
        } else if url.is_empty() {
            Err("an image part needs a URL".to_string())
        } else {
            Err("an image URL must be a data URI or an http(s) URL".to_string())
        }
    }

    /// An audio clip's tokens and name: `data` base64, `format` wav or mp3.
    pub fn audio(&self, data: &str, format: &str) -> Result<(u32, u64), String> {
        let bytes = decoded_len(data);
        let seconds = match format {
            "wav" => {
                let head = decode_prefix(data, 4096)?;
                wav_seconds(&head, bytes).ok_or("cannot read the WAV header of input_audio")?
            }
            "mp3" => bytes as f64 * 8.0 / MP3_BITS_PER_S,
            other => return Err(format!("input_audio.format '{other}' is not wav or mp3")),
        };
        let tokens = (seconds * self.audio_tokens_per_s).ceil().max(1.0);
        Ok((tokens.min(f64::from(u32::MAX)) as u32, name_of(data)))
    }

    /// A video clip's tokens and name.
    pub fn video(&self, url: &str) -> (u32, u64) {
        (self.video_tokens, name_of(url))
    }
}

/// A name for media bytes: their length and both ends (hashing a whole
/// multi-megabyte image per request would cost more than the rest).
pub(super) fn name_of(data: &str) -> u64 {
    let bytes = data.as_bytes();
    let ends = 4096.min(bytes.len());
    let mut h = Fnv1a::new();
    h.write(&(bytes.len() as u64).to_le_bytes());
    h.write(&bytes[..ends]);
    h.write(&bytes[bytes.len() - ends..]);
    h.finish()
}

/// The first (at most) `limit` bytes that `data` decodes to.
fn decode_prefix(data: &str, limit: usize) -> Result<Vec<u8>, String> {
    let chars = (limit / 3 * 4).min(data.len() / 4 * 4);
    let prefix = if chars == data.len() / 4 * 4 {
        data
    } else {
        &data[..chars]
    };
    base64::engine::general_purpose::STANDARD
        .decode(prefix.trim_end())
        .map_err(|e| format!("media data is not valid base64: {e}"))
}

/// Bytes that `data` decodes to, from its length alone.
fn decoded_len(data: &str) -> usize {
    let pad = data.bytes().rev().take_while(|&b| b == b'=').count();
    (data.len() / 4 * 3).saturating_sub(pad)
}

fn be16(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from(u16::from_be_bytes(
        b.get(at..at + 2)?.try_into().ok()?,
    )))
}

fn le16(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from(u16::from_le_bytes(
        b.get(at..at + 2)?.try_into().ok()?,
    )))
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// `[width, height]` from a PNG, JPEG, GIF or WebP header.
pub fn image_size(b: &[u8]) -> Option<[u32; 2]> {
    if b.starts_with(b"\x89PNG\r\n\x1a\n") && b.get(12..16) == Some(b"IHDR") {
        let w = u32::from_be_bytes(b.get(16..20)?.try_into().ok()?);
        let h = u32::from_be_bytes(b.get(20..24)?.try_into().ok()?);
        return Some([w, h]);
    }
    if b.starts_with(b"GIF8") {
        return Some([le16(b, 6)?, le16(b, 8)?]);
    }
    if b.starts_with(b"RIFF") && b.get(8..12) == Some(b"WEBP") {
        let le24 = |at: usize| Some(le32(b, at)? & 0x00ff_ffff);
        return match b.get(12..16)? {
            b"VP8X" => Some([1 + le24(24)?, 1 + le24(27)?]),
            b"VP8 " => Some([le16(b, 26)? & 0x3fff, le16(b, 28)? & 0x3fff]),
            b"VP8L" => {
                let bits = le32(b, 21)?;
                Some([1 + (bits & 0x3fff), 1 + ((bits >> 14) & 0x3fff)])
            }
            _ => None,
        };
    }
    if b.starts_with(&[0xff, 0xd8]) {
        return jpeg_size(b);
    }
    None
}

/// Walks the JPEG segments to the first start-of-frame.
fn jpeg_size(b: &[u8]) -> Option<[u32; 2]> {
    let mut i = 2;
    loop {
        while *b.get(i)? != 0xff {
            i += 1;
        }
        while *b.get(i)? == 0xff {
            i += 1;
        }
        let marker = *b.get(i)?;
        i += 1;
        match marker {
            0xc0..=0xcf if !matches!(marker, 0xc4 | 0xc8 | 0xcc) => {
                return Some([be16(b, i + 5)?, be16(b, i + 3)?]);
            }
            0x01 | 0xd0..=0xd9 => {}
            _ => i += be16(b, i)? as usize,
        }
    }
}

/// A WAV clip's length in seconds: its data over its byte rate (the data
/// chunk's declared size, or what the clip holds if that is less).
fn wav_seconds(head: &[u8], total: usize) -> Option<f64> {
    if !head.starts_with(b"RIFF") || head.get(8..12) != Some(b"WAVE") {
        return None;
    }
    let (mut at, mut byte_rate) = (12, None);
    while let (Some(id), Some(size)) = (head.get(at..at + 4), le32(head, at + 4)) {
        match id {
            b"fmt " => byte_rate = le32(head, at + 16).filter(|&r| r > 0),
            b"data" => {
                let held = total.saturating_sub(at + 8);
                let data = (size as usize).min(held);
                return Some(data as f64 / f64::from(byte_rate?));
            }
            _ => {}
        }
        at += 8 + size as usize + (size as usize & 1);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    fn png(w: u32, h: u32) -> Vec<u8> {
        let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        b.extend(w.to_be_bytes());
        b.extend(h.to_be_bytes());
        b.extend([8, 2, 0, 0, 0]);
        b
    }

    #[test]
    fn patch_rule_grows_with_resolution() {
        let rule = MediaRule::default();
        // One token per 2×2 patches of 14 pixels, a partial patch counted whole.
        assert_eq!(rule.image_tokens(28, 28), 1);
        assert_eq!(rule.image_tokens(64, 64), 7);
        assert_eq!(rule.image_tokens(1024, 768), 74 * 55 / 4 + 1);
        assert_eq!(rule.image_tokens(1, 1), 1);
    }

    #[test]
    fn sizes_are_read_from_headers() {
        assert_eq!(image_size(&png(640, 480)), Some([640, 480]));
        let gif = b"GIF89a\x40\x01\xf0\x00".to_vec();
        assert_eq!(image_size(&gif), Some([320, 240]));
        // SOI, an APP0 segment of 16 bytes, then SOF0 (precision, h, w).
        let mut jpeg = vec![0xff, 0xd8, 0xff, 0xe0, 0, 16];
        jpeg.extend([0; 14]);
        jpeg.extend([0xff, 0xc0, 0, 17, 8, 0x03, 0x00, 0x04, 0x00]);
        assert_eq!(image_size(&jpeg), Some([1024, 768]));
        assert_eq!(image_size(b"not an image"), None);
    }

    #[test]
    fn data_uris_and_urls() {
        let rule = MediaRule::default();
        let uri = format!("data:image/png;base64,{}", b64(&png(64, 64)));
        assert_eq!(rule.image_url(&uri).unwrap().0, 7);
        let remote = rule.image_url("https://example.com/cat.png").unwrap().0;
        assert_eq!(remote, rule.image_tokens(1024, 1024));
        assert!(rule
            .image_url("data:image/png;base64,bm90IGFuIGltYWdl")
            .is_err());
        assert!(rule.image_url("file:///etc/passwd").is_err());
    }

    #[test]
    fn audio_length_from_wav_header_and_mp3_size() {
        let rule = MediaRule::default();
        // 16 kHz mono 16-bit: 32,000 bytes a second; two seconds of data.
        let mut wav = b"RIFF\0\0\0\0WAVEfmt \x10\0\0\0\x01\0\x01\0".to_vec();
        wav.extend(16_000u32.to_le_bytes());
        wav.extend(32_000u32.to_le_bytes());
        wav.extend([2, 0, 16, 0]);
        wav.extend(b"data");
        wav.extend(64_000u32.to_le_bytes());
        wav.extend(vec![0; 64_000]);
        assert_eq!(rule.audio(&b64(&wav), "wav").unwrap().0, 50);
        // One second at 128 kbit/s.
        assert_eq!(rule.audio(&b64(&vec![0; 16_000]), "mp3").unwrap().0, 25);
        assert!(rule.audio("AAAA", "flac").is_err());
    }

    /// Files written by real encoders (Pillow 13, Python's `wave`), in
    /// tests/vectors/media/.
    #[test]
    fn real_files() {
        macro_rules! vector {
            ($name:literal) => {
                include_bytes!(concat!("../../../tests/vectors/media/", $name)).as_slice()
            };
        }
        for (bytes, size) in [
            (vector!("rect.png"), [300, 200]),
            (vector!("rect.gif"), [300, 200]),
            (vector!("lossy.webp"), [300, 200]),
            (vector!("lossless.webp"), [300, 200]),
            (vector!("alpha.webp"), [301, 199]),
            (vector!("progressive.jpg"), [301, 199]),
            (vector!("big-comment.jpg"), [300, 200]),
        ] {
            assert_eq!(image_size(bytes), Some(size));
        }
        // The frame header lies past the first 4 KiB: the second, longer look finds it.
        let rule = MediaRule::default();
        let uri = format!("data:image/jpeg;base64,{}", b64(vector!("big-comment.jpg")));
        assert_eq!(rule.image_url(&uri).unwrap().0, rule.image_tokens(300, 200));
        // 1.5 s at 25 tokens a second.
        let wav = b64(vector!("tone-1500ms.wav"));
        assert_eq!(rule.audio(&wav, "wav").unwrap().0, 38);
    }
}

//! Prompt text of a given token length, synthesized from block ids.
//!
//! Public traces (Mooncake, Bailian) give a prompt as its length and a list
//! of block hash ids: requests whose leading ids are equal share that many
//! leading blocks of prompt. A compact trace keeps exactly that (the
//! `prompt_blocks` field, `docs/trace-format.md`), and the text is made here
//! when the request is built, from the ids alone:
//!
//! * block `h` is a stream of filler words drawn from a ChaCha8 stream keyed
//!   by `(seed, h)`, so the same id always gives the same text, and a block
//!   cut short (the prompt's last one) is a prefix of the whole block;
//! * a prompt of `tokens` tokens is the first `tokens` words of its blocks in
//!   order (`block_size` words from each but the last), joined by single
//!   spaces.
//!
//! Filler words are short common English words, each one token in the usual
//! BPE vocabularies when preceded by a space, so `n` words are `n` tokens by
//! the project's approximation and close to `n` under a real tokenizer. A
//! tokenizer's own single-token words can replace the list (`Filler::new`).
//!
//! Nothing is shared between prompts: a request is built from its own ids,
//! with no table of blocks (the Mooncake conversation trace has 170 899
//! distinct whole blocks, about 350 MB of text). The word choice is part of
//! the trace format: changing it changes every synthesized prompt.

use std::sync::OnceLock;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::CoreError;

/// The built-in filler vocabulary (the same list `specreplay.text` uses for
/// redaction): short common English words, each at most 4 letters.
pub const FILLER: [&str; 238] = [
    "the", "of", "and", "to", "in", "is", "it", "you", "that", "he", "was", "for", "on", "are",
    "as", "with", "his", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by",
    "word", "but", "not", "what", "all", "were", "we", "when", "your", "can", "said", "use", "an",
    "each", "she", "do", "how", "if", "will", "up", "out", "many", "then", "them", "so", "some",
    "her", "make", "like", "him", "into", "time", "has", "look", "two", "more", "go", "see", "no",
    "way", "my", "than", "been", "call", "who", "its", "now", "find", "long", "down", "day", "did",
    "get", "come", "made", "may", "part", "over", "new", "take", "only", "work", "know", "year",
    "live", "me", "back", "give", "most", "very", "good", "man", "old", "any", "same", "tell",
    "boy", "came", "want", "show", "also", "form", "set", "put", "end", "does", "well", "must",
    "big", "even", "such", "turn", "here", "why", "ask", "men", "read", "need", "land", "home",
    "us", "move", "try", "kind", "hand", "high", "act", "air", "away", "play", "line", "own",
    "page", "got", "left", "life", "near", "plan", "head", "cold", "dark", "fire", "rain", "four",
    "five", "six", "nine", "ten", "red", "blue", "gold", "pink", "gray", "cat", "dog", "cow",
    "pig", "hen", "fox", "owl", "bee", "ant", "sun", "moon", "star", "sky", "sea", "lake", "hill",
    "rock", "tree", "leaf", "rose", "seed", "corn", "rice", "milk", "egg", "salt", "cake", "fish",
    "meat", "soup", "tea", "hat", "coat", "shoe", "bag", "box", "cup", "pan", "pot", "door",
    "wall", "roof", "room", "bed", "desk", "lamp", "book", "pen", "map", "car", "bus", "ship",
    "road", "path", "town", "farm", "shop", "bank", "park", "yard", "gate", "east", "west", "top",
    "low", "hot", "warm", "cool", "soft", "hard", "fast", "slow", "open", "shut", "rich", "poor",
    "full", "late",
];

/// Longest prompt synthesized, in tokens: 64 times the longest public trace
/// prompts (~200K tokens), and a bound on the memory one prompt can take
/// (about 5 bytes per token).
pub const MAX_TOKENS: u64 = 1 << 24;

/// A prompt given by its blocks: `tokens` tokens made of the blocks
/// `hash_ids`, `block_size` tokens each (the last one may be cut short).
#[derive(Debug, Clone, Copy)]
pub struct PromptBlocks<'a> {
    pub tokens: u64,
    pub block_size: u64,
    pub hash_ids: &'a [u64],
    /// Varies every block's text at once (`specreplay import --seed`).
    pub seed: u64,
}

impl PromptBlocks<'_> {
    /// The blocks must cover the prompt exactly: `ceil(tokens / block_size)`
    /// of them, as in the Mooncake and Bailian traces.
    pub fn check(&self) -> Result<(), CoreError> {
        if self.tokens == 0 || self.tokens > MAX_TOKENS {
            return Err(CoreError::config(
                "prompt_blocks.tokens",
                format!("must be from 1 to {MAX_TOKENS}, got {}", self.tokens),
            ));
        }
        if self.block_size == 0 {
            return Err(CoreError::config(
                "prompt_blocks.block_size",
                "must be at least 1",
            ));
        }
        let need = self.tokens.div_ceil(self.block_size);
        if self.hash_ids.len() as u64 != need {
            return Err(CoreError::config(
                "prompt_blocks.hash_ids",
                format!(
                    "{} blocks, but {} tokens need ceil({}/{}) = {need}",
                    self.hash_ids.len(),
                    self.tokens,
                    self.tokens,
                    self.block_size
                ),
            ));
        }
        Ok(())
    }
}

/// A filler vocabulary and the synthesis over it.
#[derive(Debug, Clone)]
pub struct Filler {
    words: Vec<String>,
    /// Each word with a space before it: what is written after the first.
    spaced: Vec<String>,
}

/// Longest filler word accepted: enough for any tokenizer's plain words, and
/// it bounds the text's size per token.
pub const MAX_WORD_BYTES: usize = 64;

impl Filler {
    /// A vocabulary of plain words (no whitespace, no control characters, at
    /// most `MAX_WORD_BYTES` bytes each), e.g. a tokenizer's single-token
    /// words.
    pub fn new(words: Vec<String>) -> Result<Self, CoreError> {
        if words.is_empty() {
            return Err(CoreError::config("words", "the filler vocabulary is empty"));
        }
        if words.len() > u32::MAX as usize {
            return Err(CoreError::config("words", "more than 2^32 words"));
        }
        for w in &words {
            if w.is_empty()
                || w.len() > MAX_WORD_BYTES
                || w.chars().any(|c| c.is_whitespace() || c.is_control())
            {
                return Err(CoreError::config(
                    "words",
                    format!("{w:?} is not a plain word (1 to {MAX_WORD_BYTES} bytes, no whitespace or control characters)"),
                ));
            }
        }
        Ok(Filler::from_words(words))
    }

    /// The built-in vocabulary, `FILLER`.
    pub fn builtin() -> &'static Filler {
        static BUILTIN: OnceLock<Filler> = OnceLock::new();
        BUILTIN.get_or_init(|| Filler::from_words(FILLER.iter().map(|w| w.to_string()).collect()))
    }

    fn from_words(words: Vec<String>) -> Filler {
        let spaced = words.iter().map(|w| format!(" {w}")).collect();
        Filler { words, spaced }
    }

    pub fn words(&self) -> &[String] {
        &self.words
    }

    /// Appends the prompt's text to `out` (words joined by single spaces,
    /// none before the first: `out` may already hold what comes before it).
    pub fn write(&self, out: &mut String, prompt: &PromptBlocks<'_>) -> Result<(), CoreError> {
        prompt.check()?;
        out.reserve(prompt.tokens as usize * 5);
        let mut left = prompt.tokens;
        let mut first = true;
        for &id in prompt.hash_ids {
            let take = left.min(prompt.block_size);
            self.write_block(out, prompt.seed, id, take, &mut first);
            left -= take;
        }
        Ok(())
    }

    /// The prompt's text.
    pub fn text(&self, prompt: &PromptBlocks<'_>) -> Result<String, CoreError> {
        let mut out = String::new();
        self.write(&mut out, prompt)?;
        Ok(out)
    }

    /// The first `words` words of block `id`, each preceded by a space
    /// unless it is the prompt's `first`.
    fn write_block(&self, out: &mut String, seed: u64, id: u64, words: u64, first: &mut bool) {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        key[8..16].copy_from_slice(&id.to_le_bytes());
        let mut rng = ChaCha8Rng::from_seed(key);
        let n = self.spaced.len() as u64;
        // Random draws in batches (one call per 64 words instead of one per word).
        let mut draws = [0u32; 64];
        let mut left = words;
        while left > 0 {
            let batch = left.min(draws.len() as u64) as usize;
            rng.fill(&mut draws[..batch]);
            for &draw in &draws[..batch] {
                // Multiply-shift maps 32 random bits onto the vocabulary: no
                // division, and the same word for the same draw everywhere.
                let word = &self.spaced[((u64::from(draw) * n) >> 32) as usize];
                // One copy per word, its separating space included.
                out.push_str(if std::mem::take(first) {
                    &word[1..]
                } else {
                    word
                });
            }
            left -= batch as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(tokens: u64, block_size: u64, ids: &[u64], seed: u64) -> String {
        Filler::builtin()
            .text(&PromptBlocks {
                tokens,
                block_size,
                hash_ids: ids,
                seed,
            })
            .unwrap()
    }

    fn words(s: &str) -> Vec<&str> {
        s.split(' ').collect()
    }

    #[test]
    fn a_prompt_has_one_word_per_token() {
        for (tokens, ids) in [
            (1, vec![7]),
            (512, vec![7]),
            (513, vec![7, 8]),
            (1030, vec![0, 1, 2]),
        ] {
            let t = text(tokens, 512, &ids, 0);
            assert_eq!(words(&t).len() as u64, tokens);
            assert!(!t.starts_with(' ') && !t.ends_with(' ') && !t.contains("  "));
        }
    }

    #[test]
    fn equal_ids_give_equal_text_and_a_short_block_is_a_prefix() {
        let a = text(1030, 512, &[0, 1, 2], 0);
        let b = text(1100, 512, &[0, 1, 8], 0);
        let (a, b) = (words(&a), words(&b));
        assert_eq!(a[..1024], b[..1024]);
        assert_ne!(a[1024..], b[1024..1030]);
        let whole = text(512, 512, &[2], 0);
        assert_eq!(a[1024..], words(&whole)[..6]);
        // The same id in another position is the same text.
        let moved = text(600, 512, &[1, 9], 0);
        assert_eq!(words(&moved)[..512], a[512..1024]);
    }

    #[test]
    fn ids_and_seeds_change_the_text_and_nothing_else_does() {
        let base = text(512, 512, &[3], 0);
        assert_eq!(base, text(512, 512, &[3], 0));
        assert_ne!(base, text(512, 512, &[4], 0));
        assert_ne!(base, text(512, 512, &[3], 1));
        // The words are spread over the vocabulary, not stuck on a few.
        let distinct: std::collections::HashSet<&str> = words(&base).into_iter().collect();
        assert!(distinct.len() > 150, "{}", distinct.len());
    }

    #[test]
    fn the_text_is_stable_across_versions() {
        // Part of the trace format: a prompt written today must be the same
        // text when it is replayed by a later specreplay.
        assert_eq!(
            text(12, 8, &[0, 1], 0),
            "if door shop four corn like us word day has sky long"
        );
    }

    #[test]
    fn blocks_that_do_not_cover_the_prompt_are_refused() {
        let f = Filler::builtin();
        let bad = [
            (2000u64, 512u64, vec![0u64]),
            (10, 512, vec![0, 1]),
            (0, 512, vec![]),
            (5, 0, vec![1]),
        ];
        for (tokens, block_size, ids) in bad {
            let err = f
                .text(&PromptBlocks {
                    tokens,
                    block_size,
                    hash_ids: &ids,
                    seed: 0,
                })
                .unwrap_err();
            assert!(err.to_string().contains("prompt_blocks."), "{err}");
        }
    }

    #[test]
    fn a_tokenizer_vocabulary_replaces_the_words() {
        let f = Filler::new(vec!["alpha".into(), "beta".into()]).unwrap();
        let t = f
            .text(&PromptBlocks {
                tokens: 40,
                block_size: 16,
                hash_ids: &[1, 2, 3],
                seed: 0,
            })
            .unwrap();
        assert!(words(&t).iter().all(|w| *w == "alpha" || *w == "beta"));
        assert_eq!(words(&t).len(), 40);
        for bad in [
            vec![],
            vec!["two words".to_string()],
            vec![String::new()],
            vec!["x".repeat(65)],
        ] {
            assert!(Filler::new(bad).is_err());
        }
    }
}

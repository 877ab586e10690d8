//! The capacity model's prefix cache, as vLLM's automatic prefix caching
//! does it in small: a prompt is cut into blocks of `BLOCK_TOKENS` tokens,
//! each block named by a hash of itself and every block before it, so two
//! prompts share a block only if they share everything up to its end. A
//! request's cached tokens are the full blocks of its longest cached prefix;
//! its prefill then costs only the rest. Blocks stay cached after their
//! request ends and are evicted least recently used first.

use std::collections::{HashMap, VecDeque};

use super::hash::Fnv1a;

/// Tokens per block (vLLM's default block size).
pub const BLOCK_TOKENS: u32 = 16;

/// The prompt's tokens as they are read: counts them and hashes each full
/// block with the chain of blocks before it.
pub struct PromptTokens {
    count: u32,
    block: Fnv1a,
    chain: Fnv1a,
    blocks: Vec<u64>,
}

impl Default for PromptTokens {
    fn default() -> Self {
        PromptTokens {
            count: 0,
            block: Fnv1a::new(),
            chain: Fnv1a::new(),
            blocks: Vec::new(),
        }
    }
}

impl PromptTokens {
    /// One token, named by `id` (a word's hash, a token id).
    pub fn push(&mut self, id: u64) {
        self.block.write(&id.to_le_bytes());
        self.count += 1;
        if self.count.is_multiple_of(BLOCK_TOKENS) {
            self.chain.write(&self.block.finish().to_le_bytes());
            self.blocks.push(self.chain.finish());
            self.block = Fnv1a::new();
        }
    }

    /// Each whitespace-separated word of `text` as one token.
    pub fn push_words(&mut self, text: &str) {
        for word in text.split_whitespace() {
            let mut h = Fnv1a::new();
            h.write(word.as_bytes());
            self.push(h.finish());
        }
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    /// The hashes of the full blocks, in order.
    pub fn into_blocks(self) -> Vec<u64> {
        self.blocks
    }
}

/// Cached blocks, least recently used evicted first.
pub struct PrefixCache {
    capacity: usize,
    /// Block → the tick it was last used.
    last_used: HashMap<u64, u64>,
    /// Uses in order; an entry whose tick is no longer the block's is stale.
    uses: VecDeque<(u64, u64)>,
    tick: u64,
}

impl PrefixCache {
    /// A cache of at most `capacity_tokens` tokens (whole blocks).
    pub fn new(capacity_tokens: u64) -> PrefixCache {
        PrefixCache {
            capacity: (capacity_tokens / u64::from(BLOCK_TOKENS)) as usize,
            last_used: HashMap::new(),
            uses: VecDeque::new(),
            tick: 0,
        }
    }

    /// Whether every block of a non-empty prompt is cached (nothing moves).
    pub fn holds_whole(&self, blocks: &[u64]) -> bool {
        !blocks.is_empty() && blocks.iter().all(|b| self.last_used.contains_key(b))
    }

    /// The prompt tokens of `blocks` found cached (its longest cached prefix
    /// of whole blocks); then all its blocks are cached, as most recent.
    pub fn admit(&mut self, blocks: &[u64]) -> u32 {
        let hits = blocks
            .iter()
            .take_while(|b| self.last_used.contains_key(b))
            .count() as u32;
        for &block in blocks {
            self.tick += 1;
            self.last_used.insert(block, self.tick);
            self.uses.push_back((block, self.tick));
        }
        while self.last_used.len() > self.capacity {
            let Some((block, tick)) = self.uses.pop_front() else {
                break;
            };
            if self.last_used.get(&block) == Some(&tick) {
                self.last_used.remove(&block);
            }
        }
        // Stale entries of blocks used again: drop them once they dominate.
        if self.uses.len() > 2 * self.last_used.len() + 64 {
            let last_used = &self.last_used;
            self.uses.retain(|(b, t)| last_used.get(b) == Some(t));
        }
        hits * BLOCK_TOKENS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks_of(words: &str) -> Vec<u64> {
        let mut t = PromptTokens::default();
        t.push_words(words);
        t.into_blocks()
    }

    fn words(n: usize, prefix: &str) -> String {
        (0..n).map(|i| format!("{prefix}{i} ")).collect()
    }

    #[test]
    fn blocks_chain_their_prefix() {
        let a = blocks_of(&words(40, "w"));
        assert_eq!(a.len(), 2, "40 tokens: two full blocks");
        // The same first block, another second: the first hash is shared.
        let b = blocks_of(&(words(16, "w") + &words(24, "x")));
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1]);
        // The same second block after another first: not shared.
        let c = blocks_of(&(words(16, "y") + &words(24, "w")[..]));
        assert_ne!(a[1], c[1]);
        assert!(blocks_of(&words(15, "w")).is_empty());
    }

    #[test]
    fn hits_are_the_cached_prefix_and_eviction_is_lru() {
        let a = blocks_of(&words(48, "a"));
        let b = blocks_of(&(words(16, "a") + &words(32, "b")));
        let mut cache = PrefixCache::new(4 * u64::from(BLOCK_TOKENS));
        assert_eq!(cache.admit(&a), 0);
        assert_eq!(cache.admit(&a), 48);
        assert_eq!(cache.admit(&b), 16, "only the shared first block");
        // Five distinct blocks in a cache of four: a's oldest ones go first.
        assert_eq!(cache.admit(&a[..1]), 16);
        let other = blocks_of(&words(32, "z"));
        assert_eq!(cache.admit(&other), 0);
        assert_eq!(cache.admit(&a), 16, "a[0] was used last, a[1] evicted");
    }
}

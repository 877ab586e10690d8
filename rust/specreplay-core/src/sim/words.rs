//! The simulator's vocabulary: one token is one word of these lists.

/// Words of the reasoning phase: none of them appears in `CONTENT_WORDS`.
pub const REASONING_WORDS: [&str; 16] = [
    "hmm",
    "wait",
    "so",
    "consider",
    "suppose",
    "check",
    "maybe",
    "think",
    "then",
    "therefore",
    "alternatively",
    "verify",
    "assume",
    "because",
    "hence",
    "recall",
];
/// Words of the answer.
pub const CONTENT_WORDS: [&str; 16] = [
    "the", "answer", "is", "clear", "and", "simple", "result", "here", "final", "value", "we",
    "get", "this", "one", "yes", "done",
];

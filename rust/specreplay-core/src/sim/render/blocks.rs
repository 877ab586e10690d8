//! The walk the dialects whose streams open and close blocks share
//! (Responses output items, Anthropic content blocks): a decode step's
//! parts in order, a block opened when the kind of text changes and the
//! one before it closed. Each dialect names its events in a `BlockEvents`.

use bytes::BytesMut;

use super::{Block, Renderer};
use crate::sim::script::Texts;

/// A dialect's events around and inside a block; each is written while
/// `state.open` is the block concerned and `state.blocks` its index.
pub(super) struct BlockEvents {
    /// The block begins.
    pub start: fn(&mut Renderer, &mut BytesMut, Block),
    /// Text of the open block.
    pub delta: fn(&mut Renderer, &mut BytesMut, Block, &str),
    /// The open block ends.
    pub stop: fn(&mut Renderer, &mut BytesMut),
}

impl Renderer {
    /// One decode step: each part of `text` that is not empty (reasoning,
    /// then answer, then tool arguments), in a block of its kind.
    pub(super) fn block_step(&mut self, buf: &mut BytesMut, text: &Texts, events: &BlockEvents) {
        for (block, delta) in [
            (Block::Reasoning, &text.reasoning),
            (Block::Text, &text.content),
            (Block::Tool, &text.args),
        ] {
            if delta.is_empty() {
                continue;
            }
            if self.state.open != block {
                self.close_block(buf, events);
                self.state.open = block;
                (events.start)(self, buf, block);
            }
            (events.delta)(self, buf, block, delta);
        }
    }

    /// Ends the open block, if there is one; the next block takes the next index.
    pub(super) fn close_block(&mut self, buf: &mut BytesMut, events: &BlockEvents) {
        if self.state.open == Block::None {
            return;
        }
        (events.stop)(self, buf);
        self.state.open = Block::None;
        self.state.blocks += 1;
    }
}

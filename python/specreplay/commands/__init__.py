"""The click commands, one module each; `specreplay.cli` assembles them."""

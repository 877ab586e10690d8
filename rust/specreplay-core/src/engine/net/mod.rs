//! The engine's instrumented connections: kernel receive stamps per socket
//! read, carried to the body frames hyper hands the request task; connection
//! set-up timing; connections opened before the clock starts.

mod connector;
pub mod kernel;
mod read_log;
mod read_ring;
mod stream;

pub use connector::StampingConnector;
pub use read_log::{ConnLog, FrameClock};

#[cfg(test)]
mod tests;

//! Prediction: the simulator's server model run on a virtual clock, with
//! parameters calibrated from real runs (`specreplay calibrate`), so that
//! `specreplay replay --predict server.toml` answers "what happens at this
//! load?" in seconds, with the result columns of a real replay
//! (docs/predict.md). `model` holds what is known about the server, `plan`
//! reads each request, `des` runs the server's iterations, `point` runs a
//! sweep point (the client side and the records).

mod des;
pub mod model;
mod plan;
pub mod point;
#[cfg(test)]
mod tests;

pub use des::PredictStats;
pub use model::{OutputClass, ServerModel};
pub use plan::parse_request;
pub use point::predict_point;

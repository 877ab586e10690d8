//! Prediction: the simulator's server model run on a virtual clock, with
//! parameters calibrated from real runs (`specreplay calibrate`), so that
//! `specreplay replay --predict server.toml` answers "what happens at this
//! load?" in seconds, with the result columns of a real replay
//! (docs/predict.md). `model` holds what is known about the server, `des`
//! runs a point.

pub mod des;
pub mod model;

pub use des::{parse_request, predict_point, PredictStats};
pub use model::{OutputClass, ServerModel};

//! Helpers for tokentap's end-to-end tests: start the real binaries on free ports, talk raw
//! HTTP/1.1 to them with a timestamp on every read, and follow the admin API's live feed; records
//! read back as the record crate's own types (`records`).
//!
//! Nothing here sleeps to synchronise: readiness is a line the process prints or a connect that
//! succeeds, and results are awaited through long-polls and the live record feed.

pub mod app_server;
pub mod browser;
pub mod collector;
pub mod diagnosis;
pub mod feed;
pub mod http1;
pub mod llama;
pub mod mcp;
pub mod netns;
pub mod nginx;
pub mod numeric;
pub mod otlp_receiver;
pub mod phoenix;
pub mod process;
pub mod records;
pub mod speech;
pub mod traffic;
pub mod upstream;
pub mod websocket;
pub mod wiretap;

pub use collector::{Collector, Jaeger};
pub use feed::RecordFeed;
pub use http1::{HttpResponse, StreamedResponse};
pub use llama::LlamaServer;
pub use otlp_receiver::{OtlpReceiver, ReservedReceiver};
pub use process::{Mock, Tokentap};
pub use records::{Record, TurnRecord};
pub use upstream::{Framing, Script, ScriptedUpstream};
pub use wiretap::WireTap;

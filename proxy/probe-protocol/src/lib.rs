//! The browser probe ↔ ingest protocol (`tokentap.probe/1`): what the probe (compiled to wasm32)
//! and tokentap's ingest (`tokentap-record`'s `browser::report`) must agree on, defined once.
//!
//! - the schema name and the caps of every list and string in a report ([`caps`]);
//! - the names of the enumerated values a report carries ([`TextFormat`], [`Transport`], [`AudioKind`]);
//! - W3C Trace Context ids: lower-case hex, the checks both sides apply ([`trace`]).
//!
//! The probe writes its JSON by hand (serde would be most of its module), so this crate holds no
//! report struct; the ingest's `ProbeReport` is the schema, and a round-trip test in
//! `tokentap-record` parses reports the probe's writer produced.

pub mod caps;
mod names;
pub mod trace;

pub use names::{AudioKind, TextFormat, Transport, UnknownName};

/// The schema name at the start of every report.
pub const SCHEMA: &str = "tokentap.probe/1";

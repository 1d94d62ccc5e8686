//! tokentap-record: the versioned request record (docs/records.md) and the pure derivations over
//! records. No IO: no network, no files, no clocks beyond what a caller passes in.
//!
//! - `schema`: [`Record`] and its parts, the record version, [`Outcome`], [`RouteRole`].
//! - `stamp`: the per-chunk stamps the forwarding path takes, as the record keeps them.
//! - `ack`: client delivery from sampled TCP ACK counters (`t_acked` per chunk).
//! - `hops`: the record's diagnosis types and thresholds; `diagnosis` computes them, per hop, over
//!   one record or an ingress/egress chain.
//! - `browser`: the probe report schema and the record's browser timeline; `join` joins a report
//!   to its record; `realtime_join` joins the page's view of a realtime session's responses.
//! - `goodput`: `[slo]` objectives and the verdict on one record.
//! - `server_time`: the server's reported time joined to the wire (the split, the consistency
//!   check) and the prompt cache state.
//! - `mcp_session`: MCP sessions followed across their exchanges (`mcp.client.session.duration`).
//! - `trace`: W3C trace context and ids.
//! - `turn`: agent turns rebuilt from the wire: the tracker that links steps, the turn record.
//! - `waits`: where each answer chunk's text waited (upstream, tokentap, after the handoff, the
//!   browser), once a browser report joined.

pub mod ack;
pub mod browser;
pub mod diagnosis;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod goodput;
pub mod hops;
pub mod join;
pub mod mcp_pairing;
pub mod mcp_session;
pub mod realtime_join;
pub mod schema;
pub mod server_time;
pub mod stamp;
pub mod trace;
pub mod turn;
pub mod waits;

pub use goodput::SloConfig;
pub use schema::*;
pub use stamp::{ChunkStamp, HttpProtocol, UpstreamConnection};

/// The journal's file name in the data directory (rotated files get a numeric suffix).
pub const RECORDS_FILE: &str = "records.jsonl";

#[cfg(test)]
mod enum_names {
    use tokentap_analysis::names::{deserialized_name_mismatches, serialized_name_mismatches};

    /// Every enum declared with `named_enum!`: `as_str` is the name serde writes, and serde reads
    /// the variant back from it (for the types that derive `Deserialize`).
    #[test]
    fn as_str_is_the_name_serde_writes_and_reads() {
        let mut wrong = Vec::new();
        macro_rules! both {
            ($($t:ty),+) => { $( wrong.extend(serialized_name_mismatches::<$t>()); wrong.extend(deserialized_name_mismatches::<$t>()); )+ };
        }
        both!(
            crate::Outcome,
            crate::Provider,
            crate::ErrorSide,
            crate::TurnLink,
            crate::RouteRole,
            crate::server_time::PromptCache,
            crate::turn::TurnStatus,
            crate::hops::Hop,
            crate::hops::VerdictKind,
            crate::hops::ReleasePattern,
            crate::hops::Segment
        );
        // Written only (records carry them; nothing reads them back).
        wrong.extend(serialized_name_mismatches::<crate::goodput::Objective>());
        wrong.extend(serialized_name_mismatches::<crate::goodput::ObjectiveOutcome>());
        // The protocol's enum (serde by hand, from its `as_str`).
        for format in crate::browser::report::TextFormat::VARIANTS {
            let written = serde_json::to_value(format).unwrap();
            let read: crate::browser::report::TextFormat = serde_json::from_value(written.clone()).unwrap();
            if written != format.as_str() || read != *format {
                wrong.push(format!("{} is written as {written}", format.as_str()));
            }
        }
        assert!(wrong.is_empty(), "{wrong:?}");
    }
}

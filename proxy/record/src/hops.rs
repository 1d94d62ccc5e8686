//! The record's `diagnosis` and `chain`: where on its way to the user answer text waited, per hop,
//! and the re-buffering verdict. `diagnosis.rs` computes them; the thresholds are here.
//!
//!
//! The hops, in order: upstream arrival → tokentap handoff → client TCP ACK → browser arrival →
//! paint. Text is aligned across hops by cumulative answer characters: each answer event of
//! `analysis.events` is placed in the chunk that completed it (by `end_offset`), and that chunk's
//! stamps (`timeline.chunks[i]`, `browser.chunks[i]`) are the event's times at every hop.
//!
//! Per hop and event, the **added delay** is the time since the previous hop that saw the event.
//! A constant added delay is latency, not re-buffering (and on the browser hops it also contains
//! the clock estimate's error), so the **hold** is the added delay minus the hop's smallest added
//! delay. Text is **held** at a hop when its hold reaches [`HOLD_MS`] (plus the clock estimate's
//! uncertainty on the hop that crosses clocks). A hop **re-buffers** when at least
//! [`HELD_FRACTION`] of the answer's characters are held there. The verdict names the first hop
//! that re-buffers; docs/metrics.md ("Re-buffering verdict") lists the thresholds and why.

use serde::{Deserialize, Serialize};
use tokentap_analysis::Distribution;

/// A hop adds at least this much to an event's delay, beyond the hop's smallest added delay, for
/// the event's text to count as held there. Smooth streams stay within a frame or two (≤ 35 ms
/// of jitter was the most seen in the test suite); the buffering proxies it is meant to catch
/// hold for hundreds of milliseconds.
pub const HOLD_MS: f64 = 100.0;

/// A hop re-buffers when at least this share of the answer's characters is held there.
pub const HELD_FRACTION: f64 = 0.2;

/// Events released at a hop within this time of the previous one belong to the same release;
/// a release that contains held text is a **burst**.
pub const BURST_GAP_MS: f64 = 10.0;

/// A held event is explained by the browser's main thread when its release at the hop falls
/// inside a long animation frame or at most this long after one ended (the next frame).
pub const LONG_FRAME_SLACK_MS: f64 = 50.0;

/// Share of a browser hop's held characters that long frames must explain for the verdict to
/// blame the main thread rather than the network path.
pub const LONG_FRAME_FRACTION: f64 = 0.5;

/// A hold before tokentap's handoff is the client's back-pressure (pingora waits for the socket)
/// when the client left at least this many bytes unacknowledged.
pub const BACKLOG_BYTES: u64 = 64 * 1024;

tokentap_analysis::named_enum! {
    /// One place where answer text is seen.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub enum Hop {
        /// Chains only: tokentap's egress route handed the provider's chunk to the app (the egress
        /// record's `t_handoff_ns`). The chain's upstream arrival is the egress record's `t_up_ns`.
        EgressHandoff = "egress_handoff",
        /// Chains only: the app's output reached tokentap's ingress route (the ingress record's
        /// `t_up_ns`). Its added delay is the time the text spent in the app.
        App = "app",
        /// tokentap handed the chunk to the client connection (`timeline.chunks[].t_handoff_ns`).
        Handoff = "handoff",
        /// The client's TCP stack acknowledged the chunk (`timeline.chunks[].t_acked_ns`).
        ClientAck = "client_ack",
        /// The page had read the chunk (`browser.chunks[].t_browser_ms`). Crosses clocks.
        BrowserArrival = "browser_arrival",
        /// A frame showed the text (`browser.chunks[].t_paint_ms`).
        Paint = "paint",
    }
}

impl Hop {
    /// The hops of one record.
    pub const ALL: [Hop; 4] = [Hop::Handoff, Hop::ClientAck, Hop::BrowserArrival, Hop::Paint];
    /// The hops of a joined ingress + egress chain (`diagnose_chain`).
    pub const CHAIN: [Hop; 6] =
        [Hop::EgressHandoff, Hop::App, Hop::Handoff, Hop::ClientAck, Hop::BrowserArrival, Hop::Paint];

    /// Index into [`Aligned::at`].
    pub(crate) fn slot(self) -> usize {
        self as usize
    }
}

tokentap_analysis::named_enum! {
    /// What the verdict says, for machines. `Diagnosis::verdict` says it for people.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub enum VerdictKind {
        /// No observed hop re-buffers.
        NoRebuffering = "no_rebuffering",
        /// Fewer than two aligned answer events: nothing to compare.
        InsufficientData = "insufficient_data",
        /// Held before tokentap's handoff without a client backlog: tokentap itself (or back-pressure
        /// it could not measure).
        AtHandoff = "at_handoff",
        /// Held after tokentap's handoff: the kernel's send buffer in front of a slow client.
        ClientBacklog = "client_backlog",
        /// Held between tokentap and the page: a buffering proxy, compression, a CDN or tunnel.
        BetweenProxyAndBrowser = "between_proxy_and_browser",
        /// Held in the browser while its main thread ran long tasks.
        BrowserMainThread = "browser_main_thread",
        /// Arrived on time, painted late, without long tasks to explain it.
        BrowserPaint = "browser_paint",
        /// Chains only: held between tokentap's egress handoff and the app's output reaching
        /// tokentap's ingress route — the app buffers the stream.
        InApp = "in_app",
        /// An app server between the page and tokentap: held between tokentap's handoff (to the app
        /// server) and the browser, and the page's response was compressed.
        AppServerCompression = "app_server_compression",
        /// An app server between the page and tokentap: held between tokentap's handoff and the
        /// browser, and the page's response names a reverse proxy (`Via`).
        ReverseProxyBuffering = "reverse_proxy_buffering",
        /// An app server between the page and tokentap: held between tokentap's handoff and the
        /// browser, with no sign of compression or a reverse proxy: the app server buffers.
        AppServerBuffering = "app_server_buffering",
    }
}

/// The largest release of held text at a hop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Burst {
    /// Answer characters released together.
    pub chars: u64,
    /// The longest hold among them (ms).
    pub hold_ms: f64,
    /// When the burst was released at the hop (ms since t0).
    pub t_ms: f64,
}

tokentap_analysis::named_enum! {
    /// How a hop released the text it held: the timing pattern behind a verdict.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub enum ReleasePattern {
        /// At least [`AT_END_FRACTION`] of the held characters came out in the stream's last
        /// release: a compressor or buffer that flushes only when the response ends.
        AtEnd = "at_end",
        /// Three or more bursts at a steady interval (within [`PERIODIC_SPREAD`] of their median):
        /// a flush on a timer.
        Periodic = "periodic",
        /// Bursts at no steady interval: a buffer that flushes when it fills.
        WhenFull = "when_full",
    }
}

/// Share of the held characters that must come out in the last release for [`ReleasePattern::AtEnd`].
pub const AT_END_FRACTION: f64 = 0.8;

/// Burst intervals whose spread (max − min) is at most this share of their median are periodic.
pub const PERIODIC_SPREAD: f64 = 0.5;

/// One hop's view of the answer text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HopDelay {
    pub hop: Hop,
    /// Aligned answer events seen at this hop.
    pub events: u64,
    /// Per event: this hop's time − upstream arrival (ms).
    pub delay_ms: Distribution,
    /// Per event: this hop's time − the previous hop's time for the same text (ms). The browser
    /// arrival is compared with the handoff; the ACK hop counts only the certain wait (the last
    /// handoff sample before the ACK was seen).
    pub added_ms: Distribution,
    /// The held threshold used for this hop: [`HOLD_MS`], plus the clock uncertainty when the hop
    /// crosses clocks.
    pub hold_threshold_ms: f64,
    /// Answer characters held at this hop, and their share of the aligned characters.
    pub held_chars: u64,
    pub held_fraction: f64,
    /// Median hold of the held events (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_p50_ms: Option<f64>,
    /// The longest hold at this hop, held or not (ms): how close the hop came to the threshold.
    pub hold_max_ms: f64,
    /// Releases at this hop that contained held text.
    pub bursts: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest_burst: Option<Burst>,
    /// How the held text came out (absent without bursts), and the median time between bursts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<ReleasePattern>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_interval_ms: Option<f64>,
    /// Held characters whose release falls in or just after a long animation frame (browser hops).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub held_chars_in_long_frames: u64,
    /// True when this hop re-buffers (held_fraction ≥ [`HELD_FRACTION`]).
    pub rebuffers: bool,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The record's `diagnosis`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub kind: VerdictKind,
    /// One sentence naming the first hop where text is held, or "no re-buffering".
    pub verdict: String,
    /// The hop the verdict names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hop: Option<Hop>,
    /// Answer events and characters aligned across hops.
    pub events: u64,
    pub answer_chars: u64,
    /// Per observed hop, in order.
    pub hops: Vec<HopDelay>,
    /// Hops that could not be observed, and why.
    pub unobserved: Vec<Unobserved>,
    /// What the page's response said about the path after tokentap, when the verdict names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Evidence>,
    /// Where each answer chunk's text waited (with a browser report; `waits.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waits: Option<Waits>,
}

/// The evidence behind a verdict on the path between tokentap's handoff and the browser.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// An app server stood between the page and tokentap (the page's request was not the record's).
    pub app_server: bool,
    /// `Content-Encoding` of the page's response (the page reads it decoded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_encoding: Option<String>,
    /// `Via` of the page's response: a proxy that announces itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<ReleasePattern>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unobserved {
    pub hop: Hop,
    pub reason: String,
}

/// The record's `chain`: the egress record joined to this ingress record (same trace, its parent
/// span is this record's span). The record's `diagnosis` then covers the whole chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chain {
    pub egress_request_id: String,
    pub egress_route: String,
    /// Answer events of this record aligned with the egress record's text.
    pub aligned_events: u64,
}

/// A duration for people: "850 ms", "12.3 s".
pub fn format_ms(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.1} s", v / 1000.0)
    } else {
        format!("{v:.0} ms")
    }
}

/// A size for people: "300 bytes", "64 KB", "1.2 MB".
pub fn format_bytes(b: u64) -> String {
    match b {
        b if b >= 1_000_000 => format!("{:.1} MB", b as f64 / 1e6),
        b if b >= 1_000 => format!("{:.0} KB", b as f64 / 1e3),
        b => format!("{b} bytes"),
    }
}

// Where each answer chunk's text waited (`waits.rs` computes them).

/// Chunks listed individually in [`Waits::chunks`] (the first that waited somewhere).
pub const MAX_LISTED_CHUNKS: usize = 64;

tokentap_analysis::named_enum! {
    /// A stretch of the answer's way from the provider to the screen.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub enum Segment {
        Upstream = "upstream",
        Tokentap = "tokentap",
        /// tokentap's handoff → browser arrival, through an app server.
        AppServer = "app_server",
        /// tokentap's handoff → browser arrival, the page reading tokentap's response.
        BetweenProxyAndBrowser = "between_proxy_and_browser",
        Browser = "browser",
    }
}

/// One chunk that completed answer text: its waits per segment (ms).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkWait {
    /// Index into `timeline.chunks`.
    pub chunk: u32,
    /// Answer characters up to and including this chunk.
    pub answer_chars: u64,
    pub upstream_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokentap_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_handoff_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub browser_ms: Option<f64>,
    /// The segment whose hold was largest and at least the threshold; absent when the text
    /// waited nowhere beyond the usual.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_in: Option<Segment>,
}

/// The diagnosis's `waits`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Waits {
    /// What the stretch after tokentap's handoff is: `app_server` or `between_proxy_and_browser`.
    pub after_handoff: Segment,
    /// Distributions over the answer chunks, per segment.
    pub upstream_ms: Distribution,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokentap_ms: Option<Distribution>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_handoff_ms: Option<Distribution>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub browser_ms: Option<Distribution>,
    /// Answer chunks and characters whose text waited in each segment.
    pub waited: Vec<SegmentShare>,
    /// The first [`MAX_LISTED_CHUNKS`] chunks whose text waited somewhere.
    pub chunks: Vec<ChunkWait>,
    pub chunks_not_listed: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SegmentShare {
    pub segment: Segment,
    pub chunks: u64,
    pub chars: u64,
}

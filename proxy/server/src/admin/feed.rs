//! The live feed (`GET /_tokentap/api/stream`): server-sent events from the store's broadcast.
//!
//! The feed opens with the comment `: tokentap live feed`, sent once subscribed: a client that
//! has read it can miss no later record. Then one `record` event per stored record, its data the
//! stored JSON line; one `turn` event per closed turn (its `turns.jsonl` line); `lagged` with `{"missed":n}` when this client fell behind the broadcast by
//! `n` records. Idle feeds get a keep-alive comment now and then. The feed ends when the store
//! does.
//!
//! Memory: each record's event is formatted once ([`EventCache`]) and the same bytes go to every
//! subscriber; a subscriber that does not read holds back only its own socket (the body is polled
//! only when the connection can write), and the records the broadcast keeps for everyone. At most
//! `admin_max_feed_subscribers` feeds are open at once; one more gets a 503.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::stream;
use tokio::sync::broadcast::error::RecvError;

use super::error::AdminError;
use super::AdminState;
use crate::store::{FeedItem, StoredRecord};

const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Events formatted lately, shared by every subscriber: each record is formatted once.
#[derive(Debug, Default)]
pub(crate) struct EventCache {
    recent: Mutex<VecDeque<(Arc<StoredRecord>, Bytes)>>,
}

/// Events kept for subscribers that are a little behind (then formatted again, never wrong).
const CACHED_EVENTS: usize = 16;

impl EventCache {
    /// The `record` event of `stored`, formatted by the first subscriber that asked.
    fn event(&self, stored: &Arc<StoredRecord>) -> Bytes {
        let mut recent = self.recent.lock();
        if let Some((_, bytes)) = recent.iter().find(|(r, _)| Arc::ptr_eq(r, stored)) {
            return bytes.clone();
        }
        let bytes = format_event("record", &stored.json);
        if recent.len() == CACHED_EVENTS {
            recent.pop_front();
        }
        recent.push_back((stored.clone(), bytes.clone()));
        bytes
    }
}

/// One SSE event; every line of `data` becomes a `data:` line (a JSON line has none inside).
fn format_event(name: &str, data: &str) -> Bytes {
    let mut out = String::with_capacity(data.len() + name.len() + 16);
    out.push_str("event: ");
    out.push_str(name);
    out.push('\n');
    for line in data.split('\n') {
        out.push_str("data: ");
        out.push_str(line.strip_suffix('\r').unwrap_or(line));
        out.push('\n');
    }
    out.push('\n');
    Bytes::from(out)
}

/// How many feeds are open; a slot is given back when its connection ends.
#[derive(Debug, Default)]
pub(crate) struct Subscribers {
    open: Arc<AtomicUsize>,
}

pub(super) struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Subscribers {
    pub(super) fn take(&self, max: usize) -> Option<Slot> {
        self.open.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < max).then_some(n + 1)).ok()?;
        Some(Slot(self.open.clone()))
    }

    /// Feeds and waits open now.
    pub(crate) fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }
}

pub(super) async fn live(State(state): State<Arc<AdminState>>) -> Result<Response, AdminError> {
    let max = state.feed_max_subscribers;
    let slot = state.feed_subscribers.take(max).ok_or(AdminError::TooManySubscribers { max })?;
    let records = state.store.subscribe();
    let mut keep_alive = tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    keep_alive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let hello = Bytes::from_static(b": tokentap live feed\n\n");
    let start = (Some(hello), records, keep_alive, state.clone(), slot);
    let events = stream::unfold(start, |(hello, mut records, mut keep_alive, state, slot)| async move {
        if let Some(hello) = hello {
            return Some((Ok::<_, Infallible>(hello), (None, records, keep_alive, state, slot)));
        }
        let bytes = tokio::select! {
            received = records.recv() => match received {
                Ok(FeedItem::Record(stored)) => state.feed_events.event(&stored),
                // Turns are rare next to records: formatted per subscriber.
                Ok(FeedItem::Turn(stored)) => format_event("turn", &stored.json),
                Err(RecvError::Lagged(missed)) => format_event("lagged", &format!("{{\"missed\":{missed}}}")),
                Err(RecvError::Closed) => return None,
            },
            _ = keep_alive.tick() => Bytes::from_static(b":\n\n"),
        };
        Some((Ok(bytes), (None, records, keep_alive, state, slot)))
    });
    let headers = [(CONTENT_TYPE, "text/event-stream"), (CACHE_CONTROL, "no-cache")];
    Ok((headers, Body::from_stream(events)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_formatted_once_and_shared() {
        let cache = EventCache::default();
        let record = tokentap_record::fixtures::stream_record(2);
        let json = serde_json::to_string(&record).unwrap();
        let stored = Arc::new(StoredRecord { record, json });
        let a = cache.event(&stored);
        let b = cache.event(&stored);
        assert_eq!(a.as_ptr(), b.as_ptr(), "the second subscriber got a copy");
        assert!(a.starts_with(b"event: record\ndata: {"));
        assert!(a.ends_with(b"}\n\n"));
        assert_eq!(format_event("x", "a\nb"), Bytes::from_static(b"event: x\ndata: a\ndata: b\n\n"));
    }

    #[test]
    fn subscriber_slots_are_capped_and_given_back() {
        let subscribers = Subscribers::default();
        let first = subscribers.take(2).unwrap();
        let _second = subscribers.take(2).unwrap();
        assert!(subscribers.take(2).is_none());
        drop(first);
        assert_eq!(subscribers.open(), 1);
        assert!(subscribers.take(2).is_some());
    }
}

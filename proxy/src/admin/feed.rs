//! The live feed (`GET /_tokentap/api/stream`): server-sent events from the store's broadcast.
//!
//! The feed opens with the comment `: tokentap live feed`, sent once subscribed: a client that
//! has read it can miss no later record. Then one `record` event per stored record, its data the
//! stored JSON line; `lagged` with `{"missed":n}` when this client fell behind the broadcast by
//! `n` records. Idle feeds get a keep-alive comment now and then. The feed ends when the store
//! does.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream, StreamExt};
use tokio::sync::broadcast::error::RecvError;

use super::AdminState;

pub(super) async fn live(State(state): State<Arc<AdminState>>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let records = state.store.subscribe();
    let hello = stream::once(std::future::ready(Ok(Event::default().comment("tokentap live feed"))));
    let events = stream::unfold(records, |mut records| async move {
        let event = match records.recv().await {
            Ok(stored) => Event::default().event("record").data(&stored.json),
            Err(RecvError::Lagged(missed)) => Event::default().event("lagged").data(format!("{{\"missed\":{missed}}}")),
            Err(RecvError::Closed) => return None,
        };
        Some((Ok(event), records))
    });
    Sse::new(hello.chain(events)).keep_alive(KeepAlive::default())
}

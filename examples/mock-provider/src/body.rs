//! The response body: replays a [`Timeline`] with `sleep_until(arrival + offset)` per step, one
//! hyper frame per event, and resolves the request's [`RequestOutcome`] (completed, reset, or —
//! when hyper drops it early — cancelled).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::stats::RequestOutcome;
use crate::timeline::{Step, Timeline, RESET_GAP};

/// The error a body yields to make hyper abort the response (the `x-mock-reset-at` feature).
#[derive(Debug, thiserror::Error)]
#[error("tokentap-mock aborted the response on purpose (x-mock-reset-at)")]
pub(crate) struct DeliberateReset;

pub(crate) struct MockBody {
    origin: Instant,
    steps: VecDeque<(std::time::Duration, Step)>,
    sleep: Option<Pin<Box<Sleep>>>,
    outcome: Option<RequestOutcome>,
    exact_len: Option<u64>,
    /// When the last data frame was handed to hyper: a reset waits `RESET_GAP` after it even when
    /// the schedule is late, or HTTP/2 would discard that data together with the stream.
    last_data_at: Option<Instant>,
}

impl MockBody {
    /// A whole body sent at once (with content-length).
    pub(crate) fn full(bytes: Bytes, outcome: Option<RequestOutcome>) -> MockBody {
        let exact_len = Some(bytes.len() as u64);
        let steps =
            if bytes.is_empty() { VecDeque::new() } else { VecDeque::from([(Default::default(), Step::Data(bytes))]) };
        let mut body = MockBody { origin: Instant::now(), steps, sleep: None, outcome, exact_len, last_data_at: None };
        if body.steps.is_empty() {
            body.complete();
        }
        body
    }

    /// A streamed body (no content-length: chunked on HTTP/1.1) replaying `timeline` from `origin`.
    pub(crate) fn scheduled(origin: Instant, timeline: Timeline, outcome: RequestOutcome) -> MockBody {
        MockBody {
            origin,
            steps: timeline.into(),
            sleep: None,
            outcome: Some(outcome),
            exact_len: None,
            last_data_at: None,
        }
    }

    fn complete(&mut self) {
        if let Some(outcome) = self.outcome.take() {
            outcome.completed();
        }
    }
}

impl Body for MockBody {
    type Data = Bytes;
    type Error = DeliberateReset;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, DeliberateReset>>> {
        let this = self.get_mut();
        let Some((offset, step)) = this.steps.front() else {
            this.complete();
            return Poll::Ready(None);
        };
        let mut deadline = this.origin + *offset;
        if let (Step::Reset, Some(last)) = (step, this.last_data_at) {
            deadline = deadline.max(last + RESET_GAP);
        }
        if Instant::now() < deadline {
            let sleep = this.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
            if sleep.deadline() != deadline {
                sleep.as_mut().reset(deadline);
            }
            ready!(sleep.as_mut().poll(cx));
        }
        match this.steps.pop_front().map(|(_, step)| step) {
            Some(Step::Data(bytes)) => {
                this.last_data_at = Some(Instant::now());
                if this.steps.is_empty() {
                    // The last frame is handed to hyper: that is "completed" (hyper may not poll again).
                    this.complete();
                }
                Poll::Ready(Some(Ok(Frame::data(bytes))))
            }
            Some(Step::Reset) => {
                this.steps.clear();
                if let Some(outcome) = this.outcome.take() {
                    outcome.reset();
                }
                Poll::Ready(Some(Err(DeliberateReset)))
            }
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.steps.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        self.exact_len.map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

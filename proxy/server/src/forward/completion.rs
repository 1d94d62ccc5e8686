//! The request's completion (`logging`): its outcome classified, its `RequestData` moved into a
//! `CompletedRequest` and handed to the pipeline, after the client's acknowledgement of the tail
//! is watched when it can be.

use std::time::{Duration, Instant};

use pingora::proxy::Session;
use pingora::{Error, ErrorSource, ErrorType};

use tokentap_record::{ErrorInfo, Outcome};

use super::body::sample_ack;
use super::failure::{error_message, error_side, DNS_LOOKUP_FAILED};
use super::tail::{self, TailWatch};
use super::{RequestCtx, TapProxy};
use crate::pipeline::CompletedRequest;

impl TapProxy {
    /// The request is over: its record goes to the pipeline, now or once the tail is watched.
    pub(super) async fn complete(&self, session: &mut Session, e: Option<&Error>, ctx: &mut RequestCtx) {
        // The request is over: a kept-alive connection now waits for its next head, within
        // `[connections] keepalive_idle_s` and `head_timeout_s`.
        crate::admission::request_ended(session.stream());
        if ctx.internal {
            return;
        }
        if let Some(route) = &ctx.data.route {
            route.end_request();
        }
        if !ctx.recording {
            return;
        }
        if ctx.data.upgrade && self.ingest.config.enabled {
            // A session may outlast `probe.trace_ttl_s`; the page reports it after it ends.
            if let Some(trace) = &ctx.data.trace {
                self.ingest.recent.note(&trace.trace_id);
            }
        }
        let (outcome, error) = classify_outcome(e, ctx);
        let watch = e.is_none() && !ctx.data.chunks.chunks.is_empty() && ctx.data.ack.unavailable.is_none();
        let mut completed = Box::new(CompletedRequest { data: ctx.data.take(), outcome, error, shed: false });
        if !watch {
            self.finalize.submit_boxed(completed);
            return;
        }
        // Watch the client acknowledge the tail: one sample now, then, while the tail is not
        // acknowledged, from a task of its own that never holds the connection.
        let data = &mut completed.data;
        let mut open = false;
        match sample_ack(session, data.anchor.elapsed_ns(), data.chunks.handed_off_bytes) {
            Ok(reading) => {
                data.ack.push_tail(reading.sample);
                open = reading.open;
            }
            Err(reason) => data.ack.unavailable = Some(reason.to_string()),
        }
        let drain = Duration::from_millis(self.config.timeline.ack_drain_ms);
        // The socket and its cookie only for a tail still to watch: a tail already acknowledged
        // (most short answers) costs no second getsockopt.
        let watched = open && !data.ack.drained && data.ack.unavailable.is_none() && !drain.is_zero();
        let socket = watched.then(|| session.as_downstream().digest().and_then(|d| d.socket_digest.clone())).flatten();
        let cookie = socket.as_ref().and_then(|s| s.socket_cookie().ok());
        match (socket, cookie) {
            (Some(socket), Some(cookie)) => {
                let watch = TailWatch::new(socket, cookie, completed, Instant::now() + drain);
                // A connection that is kept alive serves its next request while the tail watcher
                // task reads its socket; one that closes after this response is watched here,
                // since closing the socket would end the watch before the client acknowledged
                // the tail.
                if session.as_downstream().get_keepalive().is_some() {
                    self.tails.watch(watch);
                } else {
                    tail::watch_here(watch, &self.finalize).await;
                }
            }
            _ => self.finalize.submit_boxed(completed),
        }
    }
}

fn classify_outcome(e: Option<&Error>, ctx: &RequestCtx) -> (Outcome, Option<ErrorInfo>) {
    if ctx.no_route {
        return (Outcome::NoRoute, None);
    }
    let Some(e) = e else {
        let outcome = match ctx.data.status {
            Some(s) if s >= 400 => Outcome::HttpError,
            Some(_) => Outcome::Ok,
            None => Outcome::ProxyError,
        };
        return (outcome, None);
    };
    let info = ErrorInfo { side: error_side(e), kind: e.etype().as_str().to_string(), message: error_message(e) };
    let outcome = match e.esource() {
        ErrorSource::Downstream => Outcome::ClientCancelled,
        ErrorSource::Upstream => match e.etype() {
            ErrorType::ReadTimedout | ErrorType::WriteTimedout => Outcome::UpstreamTimeout,
            ErrorType::ConnectTimedout
            | ErrorType::ConnectRefused
            | ErrorType::ConnectNoRoute
            | ErrorType::ConnectError
            | ErrorType::BindError
            | ErrorType::TLSHandshakeFailure
            | ErrorType::TLSHandshakeTimedout
            | ErrorType::InvalidCert
            | ErrorType::HandshakeError
            | &DNS_LOOKUP_FAILED
                if ctx.data.t_upstream_headers_ns.is_none() =>
            {
                Outcome::UpstreamConnectError
            }
            _ if ctx.data.connection.is_none() && ctx.data.t_upstream_headers_ns.is_none() => {
                Outcome::UpstreamConnectError
            }
            _ => Outcome::UpstreamError,
        },
        ErrorSource::Internal | ErrorSource::Unset => Outcome::ProxyError,
    };
    (outcome, Some(info))
}

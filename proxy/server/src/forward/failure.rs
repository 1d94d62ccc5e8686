//! Failures: the errors tokentap names (`error_while_proxy`: the one stale-connection retry,
//! otherwise never retried), the JSON answer to a request that failed before any answer
//! (`fail_to_proxy`), and the messages records and clients get (never bytes a peer sent).

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::{FailToProxy, Session};
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorSource, ErrorType};

use tokentap_record::ErrorSide;

use super::stale_connection::Closure;
use super::{RequestCtx, TapProxy, REQUEST_ID_HEADER};

/// The error kind of an upstream `101 Switching Protocols` answer to a request that asked for no
/// upgrade (refused: it would make the connection a tunnel tokentap cannot read).
pub(super) const UNSOLICITED_UPGRADE: &str = "UnsolicitedUpgrade";
/// More than [`super::response_head::MAX_INFORMATIONAL`] 1xx heads before the answer.
pub(super) const ENDLESS_INFORMATIONAL: &str = "EndlessInformational";

/// The error of a route whose upstream host name did not resolve.
const DNS_LOOKUP_FAILED_NAME: &str = "DNSLookupFailed";
pub(super) const DNS_LOOKUP_FAILED: ErrorType = ErrorType::Custom(DNS_LOOKUP_FAILED_NAME);

pub(super) fn upstream_error(kind: ErrorType, context: String) -> Box<Error> {
    let mut e = Error::explain(kind, context);
    e.esource = ErrorSource::Upstream;
    e
}

/// A connection to the upstream that could not be made: never retried (a request that never
/// reached a server would be safe to retry, but a connect timeout retried doubles the wait).
pub(super) fn connect_failed(mut e: Box<Error>) -> Box<Error> {
    e.set_retry(false);
    e
}

impl TapProxy {
    /// An error while proxying: retried once on a fresh connection when the reused one was stale,
    /// otherwise final.
    pub(super) fn retry_or_fail(
        &self,
        peer: &HttpPeer,
        session: &Session,
        e: Box<Error>,
        ctx: &mut RequestCtx,
        client_reused: bool,
    ) -> Box<Error> {
        let probe = ctx.stale_probe.take();
        let closed_before_write = std::mem::take(&mut ctx.closed_before_write);
        // The one retry: a reused connection whose server never took the request in (already
        // past its FIN before the write; or, with no response byte, its FIN acknowledging none of
        // the request, or its reset of a request left unread), and a request body replayable in
        // full. The end of stream, or a reset met reading or writing.
        let closed = matches!(e.etype(), ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError);
        // A server that closed a pooled connection rather than answer: noted, retried or not.
        let closure = match &probe {
            Some(p) if client_reused && closed => p.after_failure(),
            _ => Closure::Unknown,
        };
        if let (Some(p), Closure::RequestNotTaken | Closure::WithoutAnswer) = (&probe, &closure) {
            self.note_closed_pooled_connection(ctx, p.idle());
        }
        let stale = client_reused
            && !ctx.retried_stale_connection
            && closed
            && e.esource() == &ErrorSource::Upstream
            && !session.as_ref().retry_buffer_truncated()
            && (closed_before_write || closure == Closure::RequestNotTaken);
        if !stale {
            return while_proxying(e, peer);
        }
        ctx.retried_stale_connection = true;
        self.finalize.count_stale_connection_retry();
        let mut e = e.more_context(format!("upstream {}: stale pooled connection, retried once", peer._address));
        e.set_retry(true);
        e
    }

    /// The answer to a request that failed: a JSON 502/504/500 when no answer was sent yet.
    pub(super) async fn answer_failure(&self, session: &mut Session, e: &Error, ctx: &RequestCtx) -> FailToProxy {
        let code = match e.etype() {
            ErrorType::HTTPStatus(code) => *code,
            ErrorType::ReadTimedout | ErrorType::ConnectTimedout | ErrorType::TLSHandshakeTimedout
                if e.esource() == &ErrorSource::Upstream =>
            {
                504
            }
            _ => match e.esource() {
                ErrorSource::Upstream => 502,
                ErrorSource::Downstream => 0,
                ErrorSource::Internal | ErrorSource::Unset => 500,
            },
        };
        // Only answer when no answer was sent yet (informational heads may have been); a started
        // response ends abnormally instead. A 101 is the answer: after it the connection speaks
        // the upgraded protocol, where an HTTP response would be garbage.
        let answered = session.response_written().is_some_and(|head| {
            !head.status.is_informational() || head.status == http::StatusCode::SWITCHING_PROTOCOLS
        });
        if code > 0 && !answered {
            // `kind` is the record's `error.kind` (e.g. `ConnectRefused`), for clients that tell
            // a target that is down from one that answered with an error.
            let body = serde_json::json!({ "error": {
                "type": "tokentap_upstream_error",
                "kind": e.etype().as_str(),
                "message": format!("tokentap: {}", error_message(e)),
            }})
            .to_string();
            let mut resp = match ResponseHeader::build(code, Some(3)) {
                Ok(r) => r,
                Err(_) => return FailToProxy { error_code: code, can_reuse_downstream: false },
            };
            let _ = resp.insert_header("content-type", "application/json");
            let _ = resp.insert_header("content-length", body.len().to_string());
            if self.config.response_request_id_header {
                let _ = resp.insert_header(REQUEST_ID_HEADER, ctx.data.request_id.as_str());
            }
            if session.write_response_header(Box::new(resp), false).await.is_ok() {
                let _ = session.write_response_body(Some(Bytes::from(body)), true).await;
            }
        }
        FailToProxy { error_code: code, can_reuse_downstream: false }
    }
}

/// Whether pingora's own error line is left out: a relayed WebSocket session's error (the relay
/// logged it), and a client that went away (one calm line instead).
pub(super) fn quiet_error_log(ctx: &RequestCtx, error: &Error, summary: impl FnOnce() -> String) -> bool {
    // A relayed WebSocket session's error was logged by the relay, with what it means.
    if ctx.relayed {
        return true;
    }
    // A client that goes away (a closed tab, a stopped answer) is no error of tokentap's:
    // one calm line instead of pingora's `ERROR Fail to proxy` (the record says
    // `client_cancelled`).
    if error.esource() == &ErrorSource::Downstream {
        tracing::info!(
            path = %ctx.data.path,
            "client went away after {} response bytes ({})",
            ctx.data.chunks.handed_off_bytes,
            error.etype().as_str()
        );
        return true;
    }
    // An exchange relayed by tokentap: pingora would call its error a failed request filter.
    if ctx.exchange {
        tracing::error!("Fail to proxy: {error}, {}", summary());
        return true;
    }
    false
}

/// An error while proxying to `peer`, named after the upstream and not retried: apart from a stale
/// pooled connection (`stale_connection`), what the upstream did is what the client sees.
pub(super) fn while_proxying(e: Box<Error>, peer: &HttpPeer) -> Box<Error> {
    let mut e = e.more_context(format!("upstream {}", peer._address));
    e.set_retry(false);
    e
}

/// A message for records and clients: which side failed, the error's kind and what it means,
/// never bytes the upstream or the client sent (pingora's contexts quote them, e.g. a garbage
/// response head). Only tokentap's own context, a DNS failure naming the configured host, is kept.
pub(super) fn error_message(e: &Error) -> String {
    let side = error_side(e).as_str();
    let what = match e.etype() {
        ErrorType::ConnectTimedout => "connecting timed out",
        ErrorType::ConnectRefused => "the connection was refused",
        ErrorType::ConnectNoRoute => "no route to the host",
        ErrorType::TLSHandshakeFailure | ErrorType::HandshakeError => "the TLS handshake failed",
        ErrorType::TLSHandshakeTimedout => "the TLS handshake timed out",
        ErrorType::InvalidCert => "the certificate was not accepted",
        ErrorType::ConnectError | ErrorType::SocketError | ErrorType::BindError => "could not connect",
        ErrorType::InvalidHTTPHeader => "the response head is not valid HTTP",
        ErrorType::Custom(UNSOLICITED_UPGRADE) => "the upstream switched protocols without an upgrade request",
        ErrorType::Custom(ENDLESS_INFORMATIONAL) => "too many informational (1xx) heads before the answer",
        ErrorType::H1Error => "HTTP/1 protocol error",
        ErrorType::H2Error | ErrorType::InvalidH2 | ErrorType::H2Downgrade => "HTTP/2 protocol error",
        ErrorType::ReadError => "reading failed",
        ErrorType::WriteError => "writing failed",
        ErrorType::ReadTimedout => "no data within the read timeout",
        ErrorType::WriteTimedout => "writing timed out",
        ErrorType::ConnectionClosed => "the connection closed early",
        &DNS_LOOKUP_FAILED => {
            let context = e.context.as_ref().map(|c| c.as_str()).unwrap_or("");
            // At most 300 bytes, cut on a character boundary.
            let mut end = context.len().min(300);
            while !context.is_char_boundary(end) {
                end -= 1;
            }
            return format!("{side} error {DNS_LOOKUP_FAILED_NAME}: {}", &context[..end]);
        }
        _ => "failed",
    };
    format!("{side} error {}: {what}", e.etype().as_str())
}

pub(super) fn error_side(e: &Error) -> ErrorSide {
    match e.esource() {
        ErrorSource::Upstream => ErrorSide::Upstream,
        ErrorSource::Downstream => ErrorSide::Client,
        ErrorSource::Internal | ErrorSource::Unset => ErrorSide::Internal,
    }
}

//! Joins what the page saw of a realtime WebSocket session (the probe report's `realtime`) to the
//! session's record: per response, when its events reached the page and when its audio was
//! heard, next to what tokentap saw on the wire. Pure arithmetic, no IO.
//!
//! A page response joins the record's response with the same `response_id`; a page response
//! whose id the record does not have (the record dropped it past its cap) is left out. All times
//! are converted with the report's clock offset (`rel`) to ms since the record's t0.

use tokentap_analysis::realtime::RealtimeSession;

use crate::browser::report::{AudioStart, ReportedRealtime};
use crate::browser::timeline::{BrowserAudio, BrowserRealtimeResponse};

/// A browser playback on tokentap's timeline.
pub fn browser_audio(a: &AudioStart, rel: impl Fn(f64) -> f64) -> BrowserAudio {
    BrowserAudio {
        kind: a.kind.clone(),
        audible_ms: rel(a.audible_ms),
        output_latency_ms: a.output_latency_ms,
        end_ms: a.end_ms.map(&rel),
        underruns: a.underruns,
        starved_ms: a.starved_ms,
        interrupted: a.interrupted,
        scheduled_audio_ms: a.scheduled_audio_ms,
    }
}

/// The page's view of each response of `session`, in the record's order.
pub fn join_realtime(
    session: &RealtimeSession,
    page: &ReportedRealtime,
    rel: impl Fn(f64) -> f64,
) -> Vec<BrowserRealtimeResponse> {
    let mut joined: Vec<BrowserRealtimeResponse> = page
        .responses
        .iter()
        .filter_map(|seen| {
            let (index, wire) = session
                .responses
                .iter()
                .enumerate()
                .find(|(_, r)| r.response_id.as_deref() == Some(seen.response_id.as_str()))?;
            let first_audio_ms = seen.first_audio_ms.map(&rel);
            let playout = seen.audio.as_ref().map(|a| browser_audio(a, &rel));
            let heard_ms = playout.as_ref().map(|p| p.audible_ms);
            let user = wire.user.as_ref();
            let since = |from: Option<f64>| Some(heard_ms? - from?);
            Some(BrowserRealtimeResponse {
                response_id: seen.response_id.clone(),
                index,
                created_ms: seen.created_ms.map(&rel),
                first_audio_ms,
                done_ms: seen.done_ms.map(&rel),
                first_audio_delivery_ms: first_audio_ms.zip(wire.first_audio_ms).map(|(page, proxy)| page - proxy),
                heard_after_first_audio_ms: since(wire.first_audio_ms),
                time_to_heard_from_speech_stopped_ms: since(user.and_then(|u| u.speech_stopped_ms)),
                voice_to_voice_ms: since(user.and_then(|u| u.speech_end_estimated_ms)),
                playout,
                heard_ms,
            })
        })
        .collect();
    joined.sort_by_key(|r| r.index);
    joined.dedup_by_key(|r| r.index);
    joined
}

#[cfg(test)]
mod tests {
    use tokentap_analysis::realtime::session::UserSpeech;
    use tokentap_analysis::realtime::{RealtimeAnalyzer, RealtimeContext, RealtimeResponse, ResponseTrigger};

    use super::*;
    use crate::browser::report::ReportedRealtimeResponse;

    fn response(id: &str, stopped: f64, end: f64, first_audio: f64) -> RealtimeResponse {
        let json = serde_json::json!({
            "response_id": id, "trigger": "server_vad", "created_ms": stopped + 5.0,
            "first_audio_ms": first_audio, "audio_deltas": 3, "audio_ms": 300.0,
        });
        let mut r: RealtimeResponse = serde_json::from_value(json).unwrap();
        r.trigger = ResponseTrigger::ServerVad;
        r.user = Some(UserSpeech {
            speech_stopped_ms: Some(stopped),
            speech_end_estimated_ms: Some(end),
            ..UserSpeech::default()
        });
        r
    }

    fn session(responses: Vec<RealtimeResponse>) -> RealtimeSession {
        let analyzer = RealtimeAnalyzer::new(RealtimeContext { deflate: None, limits: Default::default() });
        let mut s = analyzer.finish(5_000_000_000);
        s.responses = responses;
        s
    }

    fn seen(id: &str, first_audio: Option<f64>, audible: Option<f64>) -> ReportedRealtimeResponse {
        ReportedRealtimeResponse {
            response_id: id.into(),
            created_ms: Some(1_000.0),
            first_audio_ms: first_audio,
            done_ms: None,
            audio_deltas: 3,
            audio: audible.map(|t| AudioStart {
                kind: "audio_context".into(),
                audible_ms: t,
                output_latency_ms: Some(10.0),
                end_ms: Some(t + 300.0),
                underruns: 0,
                starved_ms: 0.0,
                interrupted: false,
                scheduled_audio_ms: Some(300.0),
            }),
        }
    }

    #[test]
    fn responses_join_by_id_with_times_on_the_record_timeline() {
        let session =
            session(vec![response("resp_a", 1_000.0, 500.0, 1_300.0), response("resp_b", 4_000.0, 3_500.0, 4_250.0)]);
        // The browser clock runs 100 ms behind tokentap's, and t0 is 10_000 ms on tokentap's clock.
        let rel = |t: f64| t + 100.0 - 10_000.0;
        let page = ReportedRealtime {
            session_id: Some("sess_1".into()),
            // The page lists them in its own order, plus one the record does not know.
            responses: vec![
                seen("resp_b", Some(14_160.0), Some(14_200.0)),
                seen("resp_x", Some(1.0), Some(2.0)),
                seen("resp_a", Some(11_210.0), None),
            ],
            responses_dropped: 0,
            messages: 40,
        };
        let joined = join_realtime(&session, &page, rel);
        assert_eq!(joined.iter().map(|r| r.index).collect::<Vec<_>>(), vec![0, 1]);
        let (a, b) = (&joined[0], &joined[1]);
        assert_eq!(a.response_id, "resp_a");
        assert_eq!(a.first_audio_ms, Some(1_310.0));
        assert_eq!(a.first_audio_delivery_ms, Some(10.0));
        assert_eq!(a.heard_ms, None, "not played: no heard time, nothing derived from it");
        assert_eq!(a.voice_to_voice_ms, None);
        assert_eq!(b.first_audio_ms, Some(4_260.0));
        assert_eq!(b.heard_ms, Some(4_300.0));
        assert_eq!(b.heard_after_first_audio_ms, Some(50.0));
        assert_eq!(b.time_to_heard_from_speech_stopped_ms, Some(300.0));
        assert_eq!(b.voice_to_voice_ms, Some(800.0));
        assert_eq!(b.playout.as_ref().unwrap().end_ms, Some(4_600.0));
    }

    #[test]
    fn a_response_reported_twice_joins_once() {
        let session = session(vec![response("resp_a", 1_000.0, 500.0, 1_300.0)]);
        let page = ReportedRealtime {
            session_id: None,
            responses: vec![seen("resp_a", Some(1_310.0), Some(1_400.0)), seen("resp_a", None, None)],
            responses_dropped: 0,
            messages: 0,
        };
        assert_eq!(join_realtime(&session, &page, |t| t).len(), 1);
    }
}

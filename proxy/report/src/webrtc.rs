//! WebRTC voice sessions over records (`browser.webrtc` of the offers' records, as the browser probe
//! measured them): per answer, the waits docs/metrics.md ("Realtime voice: sessions over WebRTC")
//! defines, as distributions over every answer of every session in the window, and how many
//! sessions and answers sounded choppy.

use serde::Serialize;
use tokentap_analysis::Distribution;
use tokentap_record::Record;

/// The report's WebRTC section.
#[derive(Debug, Clone, Serialize)]
pub struct WebrtcSummary {
    pub sessions: u64,
    /// Answers heard (voice turns), over every session.
    pub answers: u64,
    /// Sessions and answers whose concealed samples were above 2 % (docs/metrics.md).
    pub choppy_sessions: u64,
    pub choppy_answers: u64,
    /// Answers the user talked over.
    pub barge_ins: u64,
    /// End of speech → the answer's first sample played (the user's whole wait).
    pub voice_to_ear_ms: Option<Distribution>,
    /// End of speech → the answer's first audible packet in the page (the server and the network).
    pub speech_end_to_first_packet_ms: Option<Distribution>,
    pub jitter_buffer_ms: Option<Distribution>,
    pub playout_delay_ms: Option<Distribution>,
}

/// The WebRTC section over `records`, `None` when none of them carried a measured peer connection.
pub fn summarize_webrtc(records: &[&Record]) -> Option<WebrtcSummary> {
    let sessions: Vec<_> = records.iter().filter_map(|r| r.browser.as_ref()?.webrtc.as_ref()).collect();
    if sessions.is_empty() {
        return None;
    }
    let turns = || sessions.iter().flat_map(|w| w.turns.iter());
    let of = |values: Vec<f64>| Distribution::from_samples(&values);
    Some(WebrtcSummary {
        sessions: sessions.len() as u64,
        answers: turns().count() as u64,
        choppy_sessions: sessions.iter().filter(|w| w.choppy).count() as u64,
        choppy_answers: turns().filter(|t| t.choppy).count() as u64,
        barge_ins: sessions.iter().map(|w| w.barge_ins).sum(),
        voice_to_ear_ms: of(turns().filter_map(|t| t.voice_to_ear_ms).collect()),
        speech_end_to_first_packet_ms: of(turns()
            .filter_map(|t| Some(t.first_packet_ms? - t.speech_end_ms?))
            .collect()),
        jitter_buffer_ms: of(turns().filter_map(|t| t.delays.jitter_buffer_ms).collect()),
        playout_delay_ms: of(turns().filter_map(|t| t.delays.playout_delay_ms).collect()),
    })
}

impl WebrtcSummary {
    /// Each row of the section's table: its words and its distribution.
    pub fn rows(&self) -> [(&'static str, Option<&Distribution>); 4] {
        [
            ("end of speech → heard: voice to ear (ms)", self.voice_to_ear_ms.as_ref()),
            ("end of speech → first packet in the page (ms)", self.speech_end_to_first_packet_ms.as_ref()),
            ("jitter buffer (ms)", self.jitter_buffer_ms.as_ref()),
            ("playout delay (ms)", self.playout_delay_ms.as_ref()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_of_every_session_are_one_distribution_and_choppy_ones_are_counted() {
        let a = tokentap_record::fixtures::stream_record(2);
        let b = tokentap_record::fixtures::stream_record(2);
        let plain = tokentap_record::fixtures::stream_record(2);
        let webrtc = |turns: serde_json::Value, choppy: bool| {
            serde_json::from_value(serde_json::json!({"turns": turns, "choppy": choppy, "barge_ins": 1})).unwrap()
        };
        let t = |i: usize| i as f64;
        let mut a = tokentap_record::fixtures::with_browser(a, &t, &t, 1.0, Vec::new());
        let mut b = tokentap_record::fixtures::with_browser(b, &t, &t, 1.0, Vec::new());
        a.browser.as_mut().unwrap().webrtc = Some(webrtc(
            serde_json::json!([{"speech_end_ms": 100.0, "first_packet_ms": 700.0, "delivered_ms": 760.0,
                "heard_ms": 790.0, "onset_method": "ssrc", "voice_to_ear_ms": 690.0, "jitter_buffer_ms": 60.0}]),
            false,
        ));
        b.browser.as_mut().unwrap().webrtc = Some(webrtc(
            serde_json::json!([
                {"speech_end_ms": 0.0, "first_packet_ms": 900.0, "delivered_ms": 950.0, "heard_ms": 980.0,
                 "onset_method": "ssrc", "voice_to_ear_ms": 980.0, "choppy": true},
                {"delivered_ms": 2000.0, "heard_ms": 2000.0, "onset_method": "stats"}]),
            true,
        ));
        let s = summarize_webrtc(&[&a, &b, &plain]).unwrap();
        assert_eq!((s.sessions, s.answers, s.choppy_sessions, s.choppy_answers, s.barge_ins), (2, 3, 1, 1, 2));
        assert_eq!(s.voice_to_ear_ms.as_ref().unwrap().count, 2);
        assert_eq!(s.voice_to_ear_ms.as_ref().unwrap().max, 980.0);
        assert_eq!(s.speech_end_to_first_packet_ms.as_ref().unwrap().max, 900.0);
        assert!(summarize_webrtc(&[&plain]).is_none());
    }
}

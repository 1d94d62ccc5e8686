//! A response while it is open: its audio deltas, arrivals for the playout prediction and tool
//! calls, until `response.done` or the session's end turns it into a [`RealtimeResponse`].

use super::event::RealtimeAudioFormat;
use super::ms;
use super::session::{RealtimeResponse, RealtimeToolCall};

pub(super) struct OpenResponse {
    pub(super) out: RealtimeResponse,
    pub(super) arrivals: Vec<crate::audio::playout::Arrival>,
    pub(super) audio_bytes: u64,
    pub(super) first_delta_bytes: u64,
    pub(super) last_audio_ns: u64,
    pub(super) first_audio_ns: Option<u64>,
    pub(super) received_stride: u64,
    pub(super) item_ids: Vec<String>,
}

/// When a player started at the first delta would finish the audio received so far (ignoring
/// underruns), ms since t0; −∞ without audio.
pub(super) fn predicted_end(r: &OpenResponse, format: RealtimeAudioFormat) -> f64 {
    match r.first_audio_ns {
        Some(first) => ms(first) + format.ms_of(r.audio_bytes),
        None => f64::NEG_INFINITY,
    }
}

impl OpenResponse {
    pub(super) fn audio_delta(&mut self, t_ns: u64, bytes: u64, format: RealtimeAudioFormat, limit: usize) {
        let t = ms(t_ns);
        self.out.audio_deltas += 1;
        if self.first_audio_ns.is_none() {
            self.first_audio_ns = Some(t_ns);
            self.first_delta_bytes = bytes;
            self.out.first_audio_ms = Some(t);
        }
        self.audio_bytes += bytes;
        self.last_audio_ns = t_ns;
        let frames_total = self.audio_bytes / u64::from(format.bytes_per_frame());
        if self.arrivals.len() < limit {
            self.arrivals.push(crate::audio::playout::Arrival { t_ns, frames_total });
        } else {
            self.out.audio_arrivals_dropped += 1;
        }
        // `received`, thinned to at most 256 points: when full, every other point goes and the
        // stride doubles.
        let index = self.out.audio_deltas - 1;
        if index.is_multiple_of(self.received_stride) {
            if self.out.received.len() >= 256 {
                let kept: Vec<_> = self.out.received.iter().copied().step_by(2).collect();
                self.out.received = kept;
                self.received_stride *= 2;
            }
            if index.is_multiple_of(self.received_stride) {
                self.out.received.push((t, format.ms_of(self.audio_bytes)));
            }
        }
    }

    pub(super) fn call_ready(&mut self, call_id: String, name: Option<String>, t: f64) {
        if let Some(c) = self.out.tool_calls.iter_mut().find(|c| c.call_id == call_id) {
            c.name = c.name.take().or(name);
            return;
        }
        if self.out.tool_calls.len() < 32 {
            self.out.tool_calls.push(RealtimeToolCall {
                call_id,
                name,
                ready_ms: t,
                output_sent_ms: None,
                next_response_requested_ms: None,
                tool_gap_ms: None,
            });
        }
    }

    pub(super) fn finish(mut self, format: RealtimeAudioFormat) -> RealtimeResponse {
        let out = &mut self.out;
        out.audio_ms = format.ms_of(self.audio_bytes);
        if let Some(first) = out.first_audio_ms {
            if let Some(u) = &out.user {
                out.time_to_first_audio_from_speech_stopped_ms = u.speech_stopped_ms.map(|s| first - s);
                out.time_to_first_audio_from_speech_end_ms = u.speech_end_estimated_ms.map(|s| first - s);
            }
            out.time_to_first_audio_from_create_ms = out.create_sent_ms.map(|c| first - c);
            out.time_to_first_audio_from_created_ms = Some(first - out.created_ms);
            let after_first_ms = format.ms_of(self.audio_bytes - self.first_delta_bytes);
            if after_first_ms > 0.0 {
                out.real_time_factor = Some((ms(self.last_audio_ns) - first) / after_first_ms);
            }
        }
        // The last point is the whole audio received.
        let last = (ms(self.last_audio_ns), out.audio_ms);
        if self.first_audio_ns.is_some() && out.received.last() != Some(&last) {
            if out.received.len() >= 256 {
                out.received.pop();
            }
            out.received.push(last);
        }
        if let Some(first_ns) = self.first_audio_ns {
            out.predicted = Some(crate::audio::playout::simulate(&self.arrivals, format.sample_rate_hz(), 0, first_ns));
        }
        self.out
    }
}

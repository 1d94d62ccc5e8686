//! One turn (a tracked streamed fetch) and the set of turns not yet reported.
//!
//! A turn starts when a tracked `fetch` is called and is reported once its stream has ended and
//! its paints have settled ([`SETTLE_MS`] without a paint), or when the page is hidden or the app
//! calls `flush()`. A turn whose audio is still playing waits for the playback's end (see
//! [`Playout::busy_until`]). Every list in a turn is capped; what does not fit is counted, never
//! stored.

pub use crate::playout::AudioKind;
use crate::playout::Playout;
use crate::realtime::RealtimeSeen;
use crate::webrtc::WebRtcSeen;

/// What a turn keeps of each list (the protocol's caps): chunk arrivals, paints, marks (also
/// those waiting for the next turn), long animation frames and audio playbacks.
pub use tokentap_probe_protocol::caps::{MAX_AUDIO, MAX_CHUNKS, MAX_LONG_FRAMES, MAX_MARKS, MAX_PAINTS};
/// A mark name longer than this is cut (at a character boundary).
pub const MAX_MARK_NAME_BYTES: usize = tokentap_probe_protocol::caps::MAX_NAME_LEN;
/// A turn is reported when neither its stream nor a paint has moved for this long.
pub const SETTLE_MS: f64 = 300.0;
/// Turns waiting to be reported at once; past this the oldest is reported early.
pub const MAX_OPEN_TURNS: usize = 16;

/// A user-level moment (`user_send`, `user_speech_end`, …).
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    pub name: String,
    pub t_ms: f64,
}

/// One body chunk as the page received it; `bytes` is cumulative. `chars`: the answer
/// characters of the complete events received so far (`answer_text`), once counted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChunkArrival {
    pub t_ms: f64,
    pub bytes: u64,
    pub chars: Option<u64>,
}

/// One frame that changed the observed text; `chars` (Unicode scalars) is cumulative.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Paint {
    pub t_ms: f64,
    pub chars: u64,
    /// When the browser says the frame was presented, where it exposes it.
    pub presentation_ms: Option<f64>,
}

/// A long animation frame (or, where those are not exposed, a long task).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LongFrame {
    pub start_ms: f64,
    pub duration_ms: f64,
    pub blocking_ms: f64,
}

/// When audio became audible.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AudioStart {
    pub kind: AudioKind,
    pub audible_ms: f64,
    pub output_latency_ms: Option<f64>,
}

/// What the probe knows about the request of a turn.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestInfo {
    pub trace_id: String,
    pub span_id: String,
    pub page_path: String,
    pub method: String,
    /// Path only: no query string, no fragment.
    pub path: String,
}

/// One tracked streamed fetch and everything measured while it was open.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub id: u32,
    pub request: RequestInfo,
    pub status: Option<u16>,
    pub start_ms: f64,
    pub response_ms: Option<f64>,
    pub end_ms: Option<f64>,
    pub bytes: u64,
    pub chunks: Vec<ChunkArrival>,
    pub chunks_dropped: u64,
    pub paints: Vec<Paint>,
    pub paints_dropped: u64,
    pub marks: Vec<Mark>,
    pub marks_dropped: u64,
    pub long_frames: Vec<LongFrame>,
    pub long_frames_dropped: u64,
    pub audio: Vec<Playout>,
    pub audio_dropped: u64,
    /// The response is audio (`audio/*` or `application/octet-stream`, or the app plays its audio
    /// through the probe): text paints are not its answer.
    pub audio_response: bool,
    /// A tracked realtime `WebSocket` (then `start_ms` is its creation, `response_ms` its `open`
    /// and `end_ms` its close): the responses as the page saw them, each with its own playback.
    pub realtime: Option<RealtimeSeen>,
    /// A WebRTC peer connection whose offer this request carried (the SDP exchange): held until
    /// the connection closes.
    pub webrtc: Option<WebRtcSeen>,
    /// What the page's response said about the path it took (`Content-Encoding`, `Via`), and the
    /// format its answer characters were counted in.
    pub response_path: ResponsePath,
}

/// Headers of the page's response that tell how it travelled, and how its text was read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResponsePath {
    pub content_encoding: Option<String>,
    pub via: Option<String>,
    /// `Server`: a reverse proxy in front of the app often names itself here (nginx replaces the
    /// app's value with its own).
    pub server: Option<String>,
    pub text_format: Option<crate::answer_text::TextFormat>,
    /// The answer characters were counted in fields the probe inferred (`answer_text::infer`).
    pub text_inferred: bool,
    /// How the page received the stream; `None`: `fetch` (not written in the report).
    pub transport: Option<tokentap_probe_protocol::Transport>,
}

/// Longest response header value kept (longer values are cut).
pub const MAX_HEADER_VALUE_BYTES: usize = tokentap_probe_protocol::caps::MAX_HEADER_VALUE_LEN;

impl ResponsePath {
    /// Keeps a header value: printable ASCII only, at most [`MAX_HEADER_VALUE_BYTES`].
    pub fn header(value: Option<String>) -> Option<String> {
        let v: String =
            value?.trim().chars().filter(|c| (' '..='~').contains(c)).take(MAX_HEADER_VALUE_BYTES).collect();
        (!v.is_empty()).then_some(v)
    }
}

/// Where a playback goes: a turn, and in a realtime session one of its responses.
pub type AudioAt = (u32, Option<usize>);

impl Turn {
    pub fn new(id: u32, request: RequestInfo, start_ms: f64) -> Turn {
        Turn {
            id,
            request,
            status: None,
            start_ms,
            response_ms: None,
            end_ms: None,
            bytes: 0,
            chunks: Vec::new(),
            chunks_dropped: 0,
            paints: Vec::new(),
            paints_dropped: 0,
            marks: Vec::new(),
            marks_dropped: 0,
            long_frames: Vec::new(),
            long_frames_dropped: 0,
            audio: Vec::new(),
            audio_dropped: 0,
            audio_response: false,
            response_path: ResponsePath::default(),
            realtime: None,
            webrtc: None,
        }
    }

    /// A WebRTC session rides on this turn and is still open.
    pub fn webrtc_open(&self) -> bool {
        self.webrtc.as_ref().is_some_and(|w| w.closed_ms.is_none())
    }

    pub fn record_response(&mut self, t_ms: f64, status: u16) {
        self.response_ms = Some(t_ms);
        self.status = Some(status);
    }

    /// A body chunk of `len` bytes arrived. Past the cap the newest arrival replaces the last kept
    /// one, so the list always ends with the total byte count.
    pub fn record_chunk(&mut self, t_ms: f64, len: u64) {
        self.bytes += len;
        push_keeping_last(
            &mut self.chunks,
            &mut self.chunks_dropped,
            MAX_CHUNKS,
            ChunkArrival { t_ms, bytes: self.bytes, chars: None },
        );
    }

    /// Sets each arrival's answer characters from `counts`: (cumulative bytes, cumulative
    /// characters) after each chunk the counter read, in order. Arrivals past the counted bytes
    /// stay unknown.
    pub fn set_chars(&mut self, counts: &[(u64, u64)]) {
        let mut i = 0;
        for arrival in &mut self.chunks {
            while i < counts.len() && counts[i].0 < arrival.bytes {
                i += 1;
            }
            arrival.chars = counts.get(i).map(|c| c.1);
        }
    }

    /// The stream ended (normally, with an error, or cancelled by the app). Only the first end counts.
    pub fn record_end(&mut self, t_ms: f64) {
        if self.end_ms.is_none() {
            self.end_ms = Some(t_ms);
        }
    }

    /// Past the cap the newest paint replaces the last kept one, so the last paint is always known.
    pub fn record_paint(&mut self, paint: Paint) {
        push_keeping_last(&mut self.paints, &mut self.paints_dropped, MAX_PAINTS, paint);
    }

    pub fn record_mark(&mut self, mark: Mark) {
        push_capped(&mut self.marks, &mut self.marks_dropped, MAX_MARKS, mark);
    }

    pub fn record_long_frame(&mut self, frame: LongFrame) {
        push_capped(&mut self.long_frames, &mut self.long_frames_dropped, MAX_LONG_FRAMES, frame);
    }

    /// An audio start: the first sound of this turn's current playback of that kind (in a
    /// realtime session, of response `response`, by default the one playing now).
    pub fn record_audio(&mut self, audio: AudioStart, response: Option<usize>) {
        if self.realtime.is_some() {
            if let Some(p) = self.playout_for(audio.kind, response) {
                if p.audible_ms.is_none() {
                    p.heard(audio.audible_ms, audio.output_latency_ms);
                }
            }
            return;
        }
        // A playback stopped after its first sound left, before the probe read the output clock,
        // still gets it (`Playout::heard` refuses a first sound later than the stop).
        let unheard = self.audio.iter().rposition(|p| p.kind == audio.kind && p.audible_ms.is_none());
        let playout = match unheard {
            Some(i) => self.audio.get_mut(i),
            None => self.playout(audio.kind),
        };
        if let Some(p) = playout {
            p.heard(audio.audible_ms, audio.output_latency_ms);
        }
    }

    /// The playback audio goes to: in a realtime session, response `response`'s (by default the
    /// one whose audio came last); otherwise the turn's current one of `kind`.
    pub fn playout_for(&mut self, kind: AudioKind, response: Option<usize>) -> Option<&mut Playout> {
        if self.realtime.is_none() {
            return self.playout(kind);
        }
        self.audio_response = true;
        let realtime = self.realtime.as_mut()?;
        let index = response.or_else(|| realtime.response_index(None))?;
        realtime.playout(index, kind)
    }

    /// Every playback of the turn (a realtime session's are per response).
    pub fn playouts_mut(&mut self) -> Box<dyn Iterator<Item = &mut Playout> + '_> {
        match &mut self.realtime {
            Some(realtime) => Box::new(self.audio.iter_mut().chain(realtime.playouts_mut())),
            None => Box::new(self.audio.iter_mut()),
        }
    }

    /// The playback of `kind` still going on, or a new one (none past the cap: counted).
    pub fn playout(&mut self, kind: AudioKind) -> Option<&mut Playout> {
        self.audio_response = true;
        match self.audio.iter().rposition(|p| p.kind == kind && !p.is_stopped()) {
            Some(i) => self.audio.get_mut(i),
            None if self.audio.len() < MAX_AUDIO => {
                self.audio.push(Playout::new(kind));
                self.audio.last_mut()
            }
            None => {
                self.audio_dropped += 1;
                None
            }
        }
    }

    pub fn stream_open(&self) -> bool {
        self.end_ms.is_none()
    }

    /// The last moment anything happened to this turn's answer: the stream's end, a later paint,
    /// or the end of its audio (scheduled, or bounded while unknown). `None` while the stream is
    /// open.
    pub fn quiet_since(&self) -> Option<f64> {
        let end = self.end_ms?;
        if self.webrtc_open() {
            return None;
        }
        let end = self.webrtc.as_ref().and_then(|w| w.closed_ms).map_or(end, |c| end.max(c));
        let last_paint = self.paints.last().map_or(end, |p| p.t_ms);
        let realtime = self.realtime.iter().flat_map(RealtimeSeen::playouts);
        let audio = self.audio.iter().chain(realtime).filter_map(Playout::busy_until).fold(end, f64::max);
        Some(end.max(last_paint).max(audio))
    }

    /// When this turn can be reported, if its stream has ended.
    pub fn settle_deadline(&self) -> Option<f64> {
        self.quiet_since().map(|t| t + SETTLE_MS)
    }

    /// Whether a long frame overlaps the part of the turn that matters: from the request's start
    /// to the stream's end or last paint (or now, while the stream is open).
    pub fn overlaps(&self, frame: &LongFrame) -> bool {
        let frame_end = frame.start_ms + frame.duration_ms;
        let turn_end = self.quiet_since().unwrap_or(f64::INFINITY);
        frame_end >= self.start_ms && frame.start_ms <= turn_end
    }
}

fn push_keeping_last<T>(list: &mut Vec<T>, dropped: &mut u64, cap: usize, item: T) {
    if list.len() < cap {
        list.push(item);
    } else if let Some(last) = list.last_mut() {
        *last = item;
        *dropped += 1;
    }
}

fn push_capped<T>(list: &mut Vec<T>, dropped: &mut u64, cap: usize, item: T) {
    if list.len() < cap {
        list.push(item);
    } else {
        *dropped += 1;
    }
}

/// The turns not reported yet, plus marks and audio starts waiting for the next turn.
///
/// Attribution rules (documented in the README):
/// - a mark belongs to the turn whose stream is open; made between streams, it waits for the next
///   turn (so `mark("user_send")` right before the `fetch` lands in that fetch's turn);
/// - a paint belongs to the newest turn not reported yet; paints before the first turn are ignored;
/// - a long frame belongs to every unreported turn it overlaps;
/// - an audio start belongs to the newest unreported turn, or waits for the next one.
#[derive(Debug, Default)]
pub struct Turns {
    open: Vec<Turn>,
    waiting_marks: Vec<Mark>,
    waiting_marks_dropped: u64,
    waiting_audio: Vec<AudioStart>,
    next_id: u32,
}

impl Turns {
    /// Starts a turn and returns its id, plus a turn to report right away if too many are open.
    pub fn start(&mut self, request: RequestInfo, start_ms: f64) -> (u32, Option<Turn>) {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let mut turn = Turn::new(id, request, start_ms);
        turn.marks_dropped = std::mem::take(&mut self.waiting_marks_dropped);
        for mark in self.waiting_marks.drain(..) {
            turn.record_mark(mark);
        }
        for audio in self.waiting_audio.drain(..) {
            turn.record_audio(audio, None);
        }
        let evicted = if self.open.len() >= MAX_OPEN_TURNS { Some(self.open.remove(0)) } else { None };
        self.open.push(turn);
        (id, evicted)
    }

    /// The turn with this id, if it has not been reported yet.
    pub fn get_mut(&mut self, id: u32) -> Option<&mut Turn> {
        self.open.iter_mut().find(|t| t.id == id)
    }

    pub fn mark(&mut self, mark: Mark) {
        match self.open.iter_mut().rev().find(|t| t.stream_open() || t.webrtc_open()) {
            Some(turn) => turn.record_mark(mark),
            None => push_capped(&mut self.waiting_marks, &mut self.waiting_marks_dropped, MAX_MARKS, mark),
        }
    }

    /// Records a paint on the turn whose text it most likely shows; false when there is none.
    /// Text comes from a response body, so, newest first: a turn whose text response is still
    /// streaming; else one whose response was text; else the newest turn (its response is not in
    /// yet: a placeholder). A turn whose painted text would shrink is skipped (the text was
    /// replaced). A speech request opened while the answer still streams, or just after, does not
    /// take the answer's paints.
    pub fn paint(&mut self, paint: Paint) -> bool {
        // Text that shrank was replaced (the app cleared it for the next answer): not this turn's.
        let text = |t: &Turn| {
            t.response_ms.is_some() && !t.audio_response && t.paints.last().is_none_or(|p| paint.chars >= p.chars)
        };
        let index = self
            .open
            .iter()
            .rposition(|t| text(t) && t.stream_open())
            .or_else(|| self.open.iter().rposition(text))
            .or_else(|| self.open.len().checked_sub(1));
        match index.and_then(|i| self.open.get_mut(i)) {
            Some(turn) => {
                turn.record_paint(paint);
                true
            }
            None => false,
        }
    }

    pub fn long_frame(&mut self, frame: LongFrame) {
        for turn in self.open.iter_mut().filter(|t| t.overlaps(&frame)) {
            turn.record_long_frame(frame);
        }
    }

    /// An audio start for the turn `turn` (the fetch whose answer is playing), else the newest
    /// unreported turn; before any turn, it waits for the next one.
    pub fn audio(&mut self, audio: AudioStart, turn: Option<u32>, response: Option<usize>) {
        if let Some(t) = self.turn_or_newest(turn) {
            t.record_audio(audio, response);
        } else if turn.is_none() && self.waiting_audio.len() < MAX_AUDIO {
            self.waiting_audio.push(audio);
        }
    }

    /// The oldest unreported request that started at or after `t_ms` and carries no session yet:
    /// the one that carried a WebRTC offer set at `t_ms`.
    pub fn first_started_after(&mut self, t_ms: f64) -> Option<&mut Turn> {
        self.open.iter_mut().find(|t| t.start_ms >= t_ms && t.webrtc.is_none() && t.realtime.is_none())
    }

    /// The turn with id `turn` while it is unreported (`None` once reported: its audio is not
    /// another turn's), or without an id the newest unreported turn.
    pub fn turn_or_newest(&mut self, turn: Option<u32>) -> Option<&mut Turn> {
        match turn {
            Some(id) => self.open.iter_mut().find(|t| t.id == id),
            None => self.open.last_mut(),
        }
    }

    /// Where audio goes: the realtime response named `response_id` (in the newest open session
    /// that has it), else turn `turn` or the newest, and in a realtime session the response whose
    /// audio came last. Fixed when the app schedules it, so later responses do not take it.
    pub fn locate(&mut self, turn: Option<u32>, response_id: Option<&str>) -> Option<AudioAt> {
        if let Some(id) = response_id {
            return self.open.iter().rev().find_map(|t| {
                let index = t.realtime.as_ref()?.response_index(Some(id))?;
                Some((t.id, Some(index)))
            });
        }
        let t = self.turn_or_newest(turn)?;
        Some((t.id, t.realtime.as_ref().and_then(|r| r.response_index(None))))
    }

    /// The playback at `at`, started when new.
    pub fn playout_at(&mut self, at: AudioAt, kind: AudioKind) -> Option<&mut Playout> {
        self.get_mut(at.0)?.playout_for(kind, at.1)
    }

    /// Removes and returns the turns that have settled by `now_ms`.
    pub fn take_settled(&mut self, now_ms: f64) -> Vec<Turn> {
        let (done, open) =
            std::mem::take(&mut self.open).into_iter().partition(|t| t.settle_deadline().is_some_and(|d| d <= now_ms));
        self.open = open;
        done
    }

    /// The earliest moment a turn will have settled, if any stream has ended.
    pub fn next_deadline(&self) -> Option<f64> {
        self.open.iter().filter_map(Turn::settle_deadline).reduce(f64::min)
    }

    /// Removes and returns every unreported turn (page hidden, or `flush()`).
    pub fn take_all(&mut self) -> Vec<Turn> {
        std::mem::take(&mut self.open)
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> RequestInfo {
        RequestInfo {
            trace_id: "0af7651916cd43dd8448eb211c80319c".into(),
            span_id: "b7ad6b7169203331".into(),
            page_path: "/".into(),
            method: "POST".into(),
            path: "/v1/chat/completions".into(),
        }
    }

    fn mark(name: &str, t_ms: f64) -> Mark {
        Mark { name: name.into(), t_ms }
    }

    #[test]
    fn bytes_are_cumulative_and_the_last_arrival_survives_the_cap() {
        let mut turn = Turn::new(0, request(), 0.0);
        for i in 0..MAX_CHUNKS + 10 {
            turn.record_chunk(i as f64, 3);
        }
        assert_eq!(turn.chunks.len(), MAX_CHUNKS);
        assert_eq!(turn.chunks_dropped, 10);
        assert_eq!(turn.chunks[1].bytes, 6);
        assert_eq!(turn.bytes, 3 * (MAX_CHUNKS as u64 + 10));
        assert_eq!(turn.chunks.last().unwrap().bytes, turn.bytes, "the last entry carries the total");
        assert_eq!(turn.chunks.last().unwrap().t_ms, (MAX_CHUNKS + 9) as f64);
    }

    #[test]
    fn answer_characters_go_to_the_arrival_that_completed_their_bytes() {
        let mut turn = Turn::new(0, request(), 0.0);
        for (t, len) in [(1.0, 10), (2.0, 5), (3.0, 7)] {
            turn.record_chunk(t, len);
        }
        // The counter read 10, 15 bytes; the last 7 were past its cap.
        turn.set_chars(&[(10, 0), (15, 4)]);
        let chars: Vec<Option<u64>> = turn.chunks.iter().map(|c| c.chars).collect();
        assert_eq!(chars, vec![Some(0), Some(4), None]);
        assert_eq!(ResponsePath::header(Some(" gzip ".into())), Some("gzip".into()));
        assert_eq!(ResponsePath::header(Some("\u{1}".into())), None);
        assert_eq!(ResponsePath::header(Some("x".repeat(500))).map(|v| v.len()), Some(MAX_HEADER_VALUE_BYTES));
    }

    #[test]
    fn marks_between_streams_wait_for_the_next_turn() {
        let mut turns = Turns::default();
        turns.mark(mark("user_send", 1.0));
        let (id, _) = turns.start(request(), 2.0);
        turns.mark(mark("during", 3.0));
        let turn = turns.get_mut(id).unwrap();
        assert_eq!(turn.marks, vec![mark("user_send", 1.0), mark("during", 3.0)]);
        turn.record_end(4.0);
        // The stream has ended: the next mark is for the next turn.
        turns.mark(mark("user_send", 5.0));
        assert_eq!(turns.get_mut(id).unwrap().marks.len(), 2);
        let (next, _) = turns.start(request(), 6.0);
        assert_eq!(turns.get_mut(next).unwrap().marks, vec![mark("user_send", 5.0)]);
    }

    #[test]
    fn a_turn_settles_after_its_last_paint() {
        let mut turns = Turns::default();
        let (id, _) = turns.start(request(), 0.0);
        assert!(turns.paint(Paint { t_ms: 5.0, chars: 1, presentation_ms: None }));
        assert_eq!(turns.next_deadline(), None, "the stream is still open");
        turns.get_mut(id).unwrap().record_end(100.0);
        assert_eq!(turns.next_deadline(), Some(100.0 + SETTLE_MS));
        turns.paint(Paint { t_ms: 150.0, chars: 9, presentation_ms: None });
        assert_eq!(turns.next_deadline(), Some(150.0 + SETTLE_MS));
        assert!(turns.take_settled(150.0 + SETTLE_MS - 1.0).is_empty());
        let done = turns.take_settled(150.0 + SETTLE_MS);
        assert_eq!(done.len(), 1);
        assert!(turns.is_empty());
        // Nothing to paint on any more.
        assert!(!turns.paint(Paint { t_ms: 500.0, chars: 9, presentation_ms: None }));
    }

    #[test]
    fn paints_skip_audio_responses() {
        let mut turns = Turns::default();
        let (chat, _) = turns.start(request(), 0.0);
        // A placeholder before any response: the newest turn.
        assert!(turns.paint(Paint { t_ms: 1.0, chars: 1, presentation_ms: None }));
        turns.get_mut(chat).unwrap().record_response(5.0, 200);
        let (speech, _) = turns.start(request(), 10.0);
        // The speech request's response is not in yet, then it is audio.
        assert!(turns.paint(Paint { t_ms: 15.0, chars: 5, presentation_ms: None }));
        turns.get_mut(speech).unwrap().record_response(18.0, 200);
        turns.get_mut(speech).unwrap().audio_response = true;
        assert!(turns.paint(Paint { t_ms: 20.0, chars: 9, presentation_ms: None }));
        // The answer's stream ended; its last paint still belongs to it.
        turns.get_mut(chat).unwrap().record_end(25.0);
        let (next, _) = turns.start(request(), 26.0);
        assert!(turns.paint(Paint { t_ms: 30.0, chars: 12, presentation_ms: None }));
        assert_eq!(turns.get_mut(chat).unwrap().paints.len(), 4);
        assert!(turns.get_mut(next).unwrap().paints.is_empty());
        // The app clears the text for the next question: that paint is the newest turn's.
        assert!(turns.paint(Paint { t_ms: 40.0, chars: 0, presentation_ms: None }));
        assert_eq!(turns.get_mut(next).unwrap().paints.len(), 1);
        assert_eq!(turns.get_mut(chat).unwrap().paints.len(), 4);
        assert!(turns.get_mut(speech).unwrap().paints.is_empty());
    }

    #[test]
    fn long_frames_go_to_the_turns_they_overlap() {
        let mut turns = Turns::default();
        let (first, _) = turns.start(request(), 0.0);
        turns.get_mut(first).unwrap().record_end(100.0);
        let (second, _) = turns.start(request(), 200.0);
        turns.long_frame(LongFrame { start_ms: 150.0, duration_ms: 80.0, blocking_ms: 30.0 });
        turns.long_frame(LongFrame { start_ms: 50.0, duration_ms: 60.0, blocking_ms: 10.0 });
        assert_eq!(turns.get_mut(first).unwrap().long_frames.len(), 1);
        assert_eq!(turns.get_mut(second).unwrap().long_frames.len(), 1);
        assert_eq!(turns.get_mut(second).unwrap().long_frames[0].start_ms, 150.0);
    }

    #[test]
    fn audio_goes_to_the_named_turn_and_holds_its_report_until_played_out() {
        use crate::playout::MAX_PLAYOUT_WAIT_MS;
        let mut turns = Turns::default();
        let (first, _) = turns.start(request(), 0.0);
        let (second, _) = turns.start(request(), 10.0);
        turns.get_mut(first).unwrap().record_end(50.0);
        turns.get_mut(second).unwrap().record_end(60.0);
        // The first answer plays from 1 s to 3 s of wall time while the second request is open.
        let wall = |s: f64| 1000.0 + s * 1000.0;
        turns.turn_or_newest(Some(first)).unwrap().playout(AudioKind::AudioContext).unwrap().schedule(0.0, 2.0, wall);
        turns.audio(
            AudioStart { kind: AudioKind::AudioContext, audible_ms: 1000.0, output_latency_ms: None },
            Some(first),
            None,
        );
        assert_eq!(turns.get_mut(second).unwrap().audio.len(), 0, "not the newest turn's audio");
        let played = &turns.get_mut(first).unwrap().audio[0];
        assert_eq!(played.audible_ms, Some(1000.0));
        // The second turn settles on its own; the first waits for its playback's end.
        let settled = turns.take_settled(60.0 + SETTLE_MS);
        assert_eq!(settled.iter().map(|t| t.id).collect::<Vec<_>>(), vec![second]);
        assert_eq!(turns.next_deadline(), Some(3000.0 + SETTLE_MS));
        assert_eq!(turns.take_settled(3000.0 + SETTLE_MS).len(), 1);
        // Audio for a turn already reported is not another turn's.
        let (third, _) = turns.start(request(), 4000.0);
        turns.audio(
            AudioStart { kind: AudioKind::MediaElement, audible_ms: 4100.0, output_latency_ms: None },
            Some(first),
            None,
        );
        assert!(turns.get_mut(third).unwrap().audio.is_empty());
        // A media element whose end is never known holds its turn for a bounded time.
        turns.audio(
            AudioStart { kind: AudioKind::MediaElement, audible_ms: 4100.0, output_latency_ms: None },
            None,
            None,
        );
        turns.get_mut(third).unwrap().record_end(4050.0);
        assert_eq!(turns.next_deadline(), Some(4100.0 + MAX_PLAYOUT_WAIT_MS + SETTLE_MS));
    }

    #[test]
    fn too_many_open_turns_evict_the_oldest() {
        let mut turns = Turns::default();
        let mut evicted = Vec::new();
        for i in 0..=MAX_OPEN_TURNS {
            let (_, old) = turns.start(request(), i as f64);
            evicted.extend(old);
        }
        assert_eq!(evicted.len(), 1);
        assert_eq!(evicted[0].id, 0);
        assert_eq!(turns.take_all().len(), MAX_OPEN_TURNS);
    }
}

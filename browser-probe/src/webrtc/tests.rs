//! The peer connection's readings and taps, as plain data.

use super::*;

fn reading(t: f64, rms: f64, emitted: f64, jb_s_per_sample: f64) -> Inbound {
    // 48 kHz: `t` ms of audio so far, all of it at `rms`.
    Inbound {
        packets_received: t / 20.0,
        samples_received: t * 48.0,
        energy: rms * rms * t / 1000.0,
        energy_duration_s: t / 1000.0,
        jitter_buffer_emitted: emitted,
        jitter_buffer_delay_s: emitted * jb_s_per_sample,
        ..Inbound::default()
    }
}

#[test]
fn an_answer_starts_at_the_first_audible_interval_and_ends_after_a_gap() {
    let mut s = WebRtcSeen::default();
    let mut energy = 0.0;
    let mut t = 0.0;
    // 50 ms readings: silence until 1000 ms, audible until 1500 ms, silence after.
    for step in 1..=50 {
        t = f64::from(step) * 50.0;
        let level: f64 = if t > 1000.0 && t <= 1500.0 { 0.1 } else { 0.0 };
        energy += level * level * 0.05;
        let now = Inbound {
            packets_received: t / 20.0,
            samples_received: t * 48.0,
            energy,
            energy_duration_s: t / 1000.0,
            jitter_buffer_emitted: t * 48.0,
            jitter_buffer_delay_s: t * 48.0 * 0.04,
            ..Inbound::default()
        };
        s.inbound(t, now, Some(0.002));
    }
    s.close(t + 1.0);
    assert_eq!(s.first_packet_ms, Some(50.0));
    assert_eq!(s.answers.len(), 1);
    let a = &s.answers[0];
    assert_eq!((a.delivered_ms, a.end_ms, a.method), (1025.0, Some(1475.0), OnsetMethod::Stats));
    let jb = a.delays.jitter_buffer_ms.unwrap();
    assert!((jb - 40.0).abs() < 1e-6, "{jb}");
    assert_eq!(s.rtt_ms, Some(2.0));
    assert!((s.session_delays().jitter_buffer_ms.unwrap() - 40.0).abs() < 1e-6);
}

#[test]
fn ssrc_levels_take_over_and_short_gaps_do_not_split_an_answer() {
    let mut s = WebRtcSeen::default();
    s.ssrc(100.0, 0.0);
    s.ssrc(110.0, 0.5);
    s.ssrc(120.0, 0.0);
    s.ssrc(200.0, 0.5); // 90 ms after the last audible frame: the same answer
    s.ssrc(220.0, 0.0);
    s.ssrc(600.0, 0.3); // a new answer
                        // Stats energy no longer starts answers.
    s.inbound(700.0, reading(700.0, 0.5, 0.0, 0.0), None);
    let starts: Vec<f64> = s.answers.iter().map(|a| a.delivered_ms).collect();
    assert_eq!(starts, vec![110.0, 600.0]);
    assert_eq!(s.answers[0].end_ms, Some(200.0));
}

#[test]
fn speech_ends_after_the_hangover_and_barge_in_is_counted() {
    let mut s = WebRtcSeen::default();
    let mut e = 0.0;
    let mut t = 0.0;
    s.local(t, e, 0.0);
    // Speech from 100 to 600 ms, silence to 2000 ms, speech again at 2000 ms.
    for step in 1..=45 {
        t = f64::from(step) * 50.0;
        if (t > 100.0 && t <= 600.0) || t > 2000.0 {
            e += 0.01 * 0.05;
        }
        if t == 1500.0 {
            s.ssrc(1500.0, 0.5);
        }
        s.local(t, e, t / 1000.0);
    }
    assert_eq!(s.speech.len(), 2);
    assert_eq!((s.speech[0].start_ms, s.speech[0].end_ms), (150.0, Some(600.0)));
    assert_eq!(s.speech[1].end_ms, None);
    assert_eq!(s.answers[0].barge_in_ms, Some(2050.0));
}

#[test]
fn the_levels_decaying_tail_is_not_speech() {
    // libwebrtc's level after loud speech that ended at 1000 ms: held until the next 100 ms
    // update, then a quarter of it per update; 50 ms readings.
    let mut s = WebRtcSeen::default();
    let (mut e, mut t) = (0.0, 0.0);
    s.local(t, e, 0.0);
    for step in 1..=40 {
        t = f64::from(step) * 50.0;
        let level: f64 = match t {
            t if t <= 500.0 => 0.0,
            t if t <= 1100.0 => 0.25,
            t if t <= 1200.0 => 0.0625,
            t if t <= 1300.0 => 0.0156,
            _ => 0.0039,
        };
        e += level * level * 0.05;
        s.local(t, e, t / 1000.0);
    }
    assert_eq!(s.speech.len(), 1);
    assert_eq!(s.speech[0].end_ms, Some(1100.0), "the end of the held peak, not of the tail");
}

#[test]
fn events_are_timed_or_counted_within_caps() {
    let mut s = WebRtcSeen::default();
    s.event(1.0, "response.created");
    s.event(2.0, "response.output_audio_transcript.delta");
    s.event(3.0, "response.output_audio_transcript.delta");
    s.event(4.0, &"x".repeat(MAX_NAME_LEN + 1));
    for i in 0..MAX_WEBRTC_EVENT_NAMES + 2 {
        s.event(5.0, &format!("other.{i}"));
    }
    assert_eq!(s.events, vec![ChannelEvent { name: "response.created".into(), t_ms: 1.0 }]);
    assert_eq!(s.event_counts[0], ("response.output_audio_transcript.delta".to_string(), 2));
    assert_eq!(s.event_counts.len(), MAX_WEBRTC_EVENT_NAMES);
    assert_eq!(s.events_dropped, 4);
}

#[test]
fn the_taps_onsets_lead_and_the_readings_estimates_are_kept_beside_them() {
    let mut s = WebRtcSeen { remote_tap: Some(TapState::Running), ..WebRtcSeen::default() };
    // The readings see the first answer before the tap, the second after it.
    s.ssrc(1010.0, 0.5);
    s.tap_audible(1003.5, true);
    s.ssrc(1030.0, 0.5);
    s.tap_audible(1800.0, false);
    s.ssrc(1900.0, 0.0);
    s.tap_audible(3000.0, true);
    s.ssrc(3012.0, 0.5);
    let got: Vec<(f64, OnsetMethod, Option<f64>, Option<f64>)> =
        s.answers.iter().map(|a| (a.delivered_ms, a.method, a.estimate_ms, a.end_ms)).collect();
    assert_eq!(
        got,
        vec![
            (1003.5, OnsetMethod::Worklet, Some(1010.0), Some(1800.0)),
            (3000.0, OnsetMethod::Worklet, Some(3012.0), None),
        ]
    );
    assert_eq!(s.remote_tap, Some(TapState::Running));
}

#[test]
fn a_tap_that_hears_nothing_hands_the_answers_back_to_the_readings() {
    let mut s = WebRtcSeen { remote_tap: Some(TapState::Running), ..WebRtcSeen::default() };
    s.ssrc(1000.0, 0.5);
    s.inbound(1200.0, reading(1200.0, 0.0, 0.0, 0.0), None);
    assert!(s.answers.is_empty(), "the tap may still report it");
    s.ssrc(1300.0, 0.5);
    s.inbound(1500.0, reading(1500.0, 0.0, 0.0, 0.0), None);
    assert_eq!(s.remote_tap, Some(TapState::Silent));
    s.ssrc(1600.0, 0.0);
    s.ssrc(2500.0, 0.5);
    let starts: Vec<(f64, OnsetMethod)> = s.answers.iter().map(|a| (a.delivered_ms, a.method)).collect();
    assert_eq!(starts, vec![(1000.0, OnsetMethod::Ssrc), (2500.0, OnsetMethod::Ssrc)]);
    assert_eq!(s.answers[0].end_ms, Some(1300.0));
}

#[test]
fn the_microphone_taps_speech_replaces_the_readings_and_counts_barge_in() {
    let mut s =
        WebRtcSeen { mic_tap: Some(TapState::Running), remote_tap: Some(TapState::Running), ..WebRtcSeen::default() };
    s.local(0.0, 0.0, 0.0);
    s.local(100.0, 1.0, 0.1); // loud readings: ignored
    s.tap_speech(120.0, true);
    s.tap_speech(820.5, false);
    s.tap_audible(1500.0, true);
    s.tap_speech(2000.0, true); // over the answer
    s.tap_audible(2150.0, false);
    s.tap_speech(2600.0, false);
    s.tap_audible(4000.0, true);
    s.tap_speech(4400.0, true); // after the answer's last sample, before the tap confirmed it
    s.tap_audible(4300.0, false);
    let speech: Vec<(f64, Option<f64>, SpeechSource)> =
        s.speech.iter().map(|p| (p.start_ms, p.end_ms, p.source)).collect();
    assert_eq!(
        speech,
        vec![
            (120.0, Some(820.5), SpeechSource::Worklet),
            (2000.0, Some(2600.0), SpeechSource::Worklet),
            (4400.0, None, SpeechSource::Worklet)
        ]
    );
    assert_eq!(s.answers[0].barge_in_ms, Some(2000.0));
    assert_eq!(s.answers[1].barge_in_ms, None);
}

#[test]
fn a_tap_that_heard_answers_is_not_called_silent_for_one_it_kept_whole() {
    let mut s = WebRtcSeen { remote_tap: Some(TapState::Running), ..WebRtcSeen::default() };
    s.tap_audible(1000.0, true);
    s.ssrc(1005.0, 0.5);
    s.ssrc(1100.0, 0.0);
    s.ssrc(1400.0, 0.5); // the levels' gap: a second onset the samples did not see
    s.inbound(2000.0, reading(2000.0, 0.0, 0.0, 0.0), None);
    assert_eq!(s.remote_tap, Some(TapState::Running));
    assert_eq!(s.answers.len(), 1);
}

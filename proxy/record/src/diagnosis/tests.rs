//! The verdict on synthetic timelines: one per verdict, and the edge cases (no browser, no ACK
//! data, one event, clock uncertainty).

use super::*;
use crate::ack::ClientDelivery;
use crate::fixtures::{smooth_browser, stream_record as record, t_up, with_browser, ITL_MS};

fn hop(d: &Diagnosis, hop: Hop) -> &HopDelay {
    d.hops.iter().find(|h| h.hop == hop).unwrap_or_else(|| panic!("{hop:?} not observed: {d:#?}"))
}

#[test]
fn smooth_stream_has_no_rebuffering_at_any_hop() {
    let d = diagnose(&smooth_browser(record(60))).unwrap();
    assert_eq!(d.kind, VerdictKind::NoRebuffering, "{d:#?}");
    assert!(d.verdict.starts_with("no re-buffering"), "{}", d.verdict);
    assert_eq!(d.hops.len(), 4);
    assert!(d.unobserved.is_empty());
    assert_eq!((d.events, d.answer_chars), (60, 300));
    for h in &d.hops {
        assert_eq!((h.held_chars, h.bursts), (0, 0), "{h:?}");
        assert!(!h.rebuffers);
    }
    assert!((hop(&d, Hop::BrowserArrival).delay_ms.p50 - 2.0).abs() < 1e-6);
}

#[test]
fn buffering_proxy_names_the_hop_between_tokentap_and_the_browser() {
    // Like nginx with proxy_buffering on: every 13th chunk flushes what came before it.
    let r = record(65);
    let ups: Vec<f64> = (0..65).map(|i| t_up(&r, i)).collect();
    let flush = move |i: usize| ups[(i / 13) * 13 + 12] + 3.0;
    let r = with_browser(r, &flush, &|i| flush(i) + 12.0, 0.8, vec![]);
    let d = diagnose(&r).unwrap();
    assert_eq!(d.kind, VerdictKind::BetweenProxyAndBrowser, "{d:#?}");
    assert_eq!(d.hop, Some(Hop::BrowserArrival));
    let h = hop(&d, Hop::BrowserArrival);
    assert_eq!(h.bursts, 5, "{h:?}");
    // Held beyond 100.8 ms (100 ms + the clock's uncertainty): the first 8 of every 13; the 9th
    // waits exactly 100 ms.
    assert_eq!(h.held_chars, 5 * 8 * 5, "{h:?}");
    let largest = h.largest_burst.as_ref().unwrap();
    assert_eq!(largest.chars, 13 * 5);
    assert!((largest.hold_ms - 300.0).abs() < 1e-6, "{largest:?}");
    assert!(d.verdict.starts_with("between tokentap and the browser: 62% of text held a median 21"), "{}", d.verdict);
    assert!(d.verdict.contains(" ms in 5 bursts"), "{}", d.verdict);
    assert!(d.verdict.contains("buffering proxy or compression"));
    // Paint follows arrival: the paint hop adds nothing of its own.
    assert!(!hop(&d, Hop::Paint).rebuffers);
}

#[test]
fn slow_client_names_the_kernel_backlog() {
    // Handoffs stay smooth; ACKs fall further and further behind, as with a slow reader.
    let mut r = record(60);
    for (i, c) in r.timeline.chunks.iter_mut().enumerate() {
        c.t_acked_ns = Some(c.t_up_ns + (i as u64 * 20_000_000));
    }
    r.timeline.client_delivery.as_mut().unwrap().backlog_max_bytes = 2_100_000;
    let d = diagnose(&r).unwrap();
    assert_eq!(d.kind, VerdictKind::ClientBacklog, "{d:#?}");
    assert_eq!(d.hop, Some(Hop::ClientAck));
    assert!(d.verdict.starts_with("after tokentap's handoff: client/kernel backlog up to 2.1 MB"), "{}", d.verdict);
    assert!(!hop(&d, Hop::Handoff).rebuffers);
    assert_eq!(d.unobserved.len(), 2, "no browser: {d:#?}");
    assert!(d.unobserved.iter().all(|u| u.reason == "no browser probe report"));
}

#[test]
fn a_client_behind_from_the_first_text_on_is_named_though_nothing_is_held_beyond_the_first() {
    // Every chunk reaches the client 1.90-1.96 s after its handoff: the client stalled before the
    // first text and read at the pace the text came from then on (back-pressure paced tokentap's
    // reads). Nothing waits 100 ms longer than the first did, but the client left 850 KB behind.
    let mut r = record(60);
    for (i, c) in r.timeline.chunks.iter_mut().enumerate() {
        let wait = 1_900_000_000 + (i as u64 % 5) * 15_000_000;
        c.t_acked_ns = Some(c.t_handoff_ns.unwrap() + wait);
        c.t_ack_after_ns = Some(c.t_handoff_ns.unwrap() + wait - 2_000_000);
    }
    r.timeline.client_delivery.as_mut().unwrap().backlog_max_bytes = 850_000;
    let d = diagnose(&r).unwrap();
    let ack = hop(&d, Hop::ClientAck);
    assert!(!ack.rebuffers && ack.hold_max_ms < 200.0, "{ack:?}");
    assert_eq!((d.kind, d.hop), (VerdictKind::ClientBacklog, Some(Hop::ClientAck)), "{d:#?}");
    assert!(
        d.verdict.starts_with("after tokentap's handoff: client/kernel backlog up to 850 KB; text waited a median 1"),
        "{}",
        d.verdict
    );
    assert!(d.verdict.contains("from the first text on"), "{}", d.verdict);
    // The same waits with a client that keeps its backlog small: a slow path, not a slow reader.
    r.timeline.client_delivery.as_mut().unwrap().backlog_max_bytes = 60_000;
    assert_eq!(diagnose(&r).unwrap().kind, VerdictKind::NoRebuffering);
    // A backlog, but the text went through at once: nothing to name.
    for c in r.timeline.chunks.iter_mut() {
        c.t_acked_ns = Some(c.t_handoff_ns.unwrap() + 3_000_000);
        c.t_ack_after_ns = Some(c.t_handoff_ns.unwrap() + 1_000_000);
    }
    r.timeline.client_delivery.as_mut().unwrap().backlog_max_bytes = 850_000;
    assert_eq!(diagnose(&r).unwrap().kind, VerdictKind::NoRebuffering);
}

#[test]
fn sampled_ack_times_of_an_irregular_stream_are_not_holds() {
    // Gaps alternate 50 ms and 600 ms; each chunk is seen acknowledged only at the next handoff,
    // up to 600 ms after it really was. That is sampling, not a hold.
    let mut r = record(40);
    let mut t = 100_000_000u64;
    for (i, c) in r.timeline.chunks.iter_mut().enumerate() {
        c.t_up_ns = t;
        c.t_handoff_ns = Some(t + 100_000);
        t += if i % 2 == 0 { 50_000_000 } else { 600_000_000 };
    }
    let handoffs: Vec<u64> = r.timeline.chunks.iter().map(|c| c.t_handoff_ns.unwrap()).collect();
    for (i, c) in r.timeline.chunks.iter_mut().enumerate() {
        c.t_acked_ns = Some(handoffs.get(i + 1).copied().unwrap_or(handoffs[i] + 2_000_000));
    }
    let d = diagnose(&r).unwrap();
    assert_eq!(d.kind, VerdictKind::NoRebuffering, "{d:#?}");
    let ack = hop(&d, Hop::ClientAck);
    assert!(ack.delay_ms.max > 590.0 && ack.hold_max_ms < 1.0, "{ack:?}");
}

#[test]
fn acks_dated_by_a_reading_long_after_are_not_holds_when_the_reading_before_is_kept() {
    // A client that keeps up, chunks 30 ms apart, its socket read once per 300 ms: each chunk is
    // dated by the next reading's last ACK, up to 300 ms late, while the reading before it (kept
    // as `t_ack_after_ns`) was before its handoff. Only the certain wait counts: no hold.
    let mut r = record(40);
    let mut t = 100_000_000u64;
    for c in r.timeline.chunks.iter_mut() {
        c.t_up_ns = t;
        c.t_handoff_ns = Some(t + 100_000);
        t += 30_000_000;
    }
    let handoffs: Vec<u64> = r.timeline.chunks.iter().map(|c| c.t_handoff_ns.unwrap()).collect();
    for (i, c) in r.timeline.chunks.iter_mut().enumerate() {
        // Read at every tenth handoff; a reading dates the chunks before it by the last ACK.
        let reading = (i / 10 + 1) * 10;
        let last_ack = handoffs.get(reading - 1).copied().unwrap_or(handoffs[i]) + 50_000;
        c.t_acked_ns = Some(last_ack.max(handoffs[i]));
        c.t_ack_after_ns = Some(handoffs[i]);
    }
    let d = diagnose(&r).unwrap();
    assert_eq!(d.kind, VerdictKind::NoRebuffering, "{d:#?}");
    let ack = hop(&d, Hop::ClientAck);
    assert!(ack.delay_ms.max > 250.0 && ack.hold_max_ms < 1.0, "{ack:?}");
    // Without the reading before, the last handoff before each ACK would be taken for it.
    for c in r.timeline.chunks.iter_mut() {
        c.t_ack_after_ns = None;
    }
    let ack = hop(&diagnose(&r).unwrap(), Hop::ClientAck).clone();
    assert!(ack.hold_max_ms > 250.0, "{ack:?}");
}

#[test]
fn back_pressure_at_handoff_is_the_client_when_it_left_a_backlog() {
    let mut r = record(40);
    for (i, c) in r.timeline.chunks.iter_mut().enumerate() {
        let t = c.t_up_ns + i as u64 * 15_000_000;
        c.t_handoff_ns = Some(t);
        c.t_acked_ns = Some(t + 1_000_000);
    }
    r.timeline.client_delivery.as_mut().unwrap().backlog_max_bytes = 900_000;
    let d = diagnose(&r).unwrap();
    assert_eq!((d.kind, d.hop), (VerdictKind::ClientBacklog, Some(Hop::Handoff)), "{d:#?}");
    assert!(d.verdict.contains("900 KB"), "{}", d.verdict);
    // Without a backlog, tokentap itself held the text.
    r.timeline.client_delivery.as_mut().unwrap().backlog_max_bytes = 2_000;
    let d = diagnose(&r).unwrap();
    assert_eq!(d.kind, VerdictKind::AtHandoff, "{d:#?}");
    assert!(d.verdict.starts_with("at tokentap's handoff"), "{}", d.verdict);
}

#[test]
fn long_tasks_delaying_paint_name_rendering() {
    // Every 20th chunk starts a 300 ms block: text that arrives meanwhile is painted after it.
    let r = record(60);
    let ups: Vec<f64> = (0..60).map(|i| t_up(&r, i)).collect();
    let blocks: Vec<(f64, f64)> = (0..3).map(|k| (ups[k * 20] + 2.0, 300.0)).collect();
    let b2 = blocks.clone();
    let paint = move |i: usize| {
        let arrival = ups[i] + 2.0;
        b2.iter().find(|&&(s, d)| s <= arrival && arrival <= s + d).map(|&(s, d)| s + d + 8.0).unwrap_or(arrival + 10.0)
    };
    let ups = (0..60).map(|i| t_up(&r, i)).collect::<Vec<_>>();
    let d = diagnose(&with_browser(r.clone(), &|i| ups[i] + 2.0, &paint, 0.5, blocks.clone())).unwrap();
    assert_eq!((d.kind, d.hop), (VerdictKind::BrowserMainThread, Some(Hop::Paint)), "{d:#?}");
    assert!(d.verdict.starts_with("in the browser: paint delayed by long tasks"), "{}", d.verdict);
    assert_eq!(hop(&d, Hop::Paint).bursts, 3);
    assert!(!hop(&d, Hop::BrowserArrival).rebuffers);

    // The same delays without long frames to explain them.
    let ups = (0..60).map(|i| t_up(&r, i)).collect::<Vec<_>>();
    let d = diagnose(&with_browser(r, &|i| ups[i] + 2.0, &paint, 0.5, vec![])).unwrap();
    assert_eq!(d.kind, VerdictKind::BrowserPaint, "{d:#?}");
}

#[test]
fn long_tasks_delaying_reads_name_the_browser_not_the_network() {
    // The app reads the stream on the main thread: a block delays the read stamps too.
    let r = record(60);
    let ups: Vec<f64> = (0..60).map(|i| t_up(&r, i)).collect();
    let blocks: Vec<(f64, f64)> = (0..3).map(|k| (ups[k * 20] + 2.0, 300.0)).collect();
    let b2 = blocks.clone();
    let arrival = move |i: usize| {
        let t = ups[i] + 2.0;
        b2.iter().find(|&&(s, d)| s < t && t <= s + d).map(|&(s, d)| s + d + 1.0).unwrap_or(t)
    };
    let d = diagnose(&with_browser(r, &arrival, &|i| arrival(i) + 10.0, 0.5, blocks)).unwrap();
    assert_eq!((d.kind, d.hop), (VerdictKind::BrowserMainThread, Some(Hop::BrowserArrival)), "{d:#?}");
    assert!(d.verdict.starts_with("in the browser: reading and paint delayed by long tasks"), "{}", d.verdict);
}

#[test]
fn without_ack_data_the_browser_hop_compares_with_the_handoff() {
    // An HTTP/2 client: no per-chunk ACK times, and the record says why.
    let mut r = record(65);
    for c in &mut r.timeline.chunks {
        c.t_acked_ns = None;
    }
    r.timeline.client_delivery = Some(ClientDelivery {
        available: false,
        reason: Some("HTTP/2 client".into()),
        backlog_max_bytes: 0,
        drained: false,
        samples: 0,
    });
    let d = diagnose(&smooth_browser(r.clone())).unwrap();
    assert_eq!(d.kind, VerdictKind::NoRebuffering, "{d:#?}");
    assert_eq!(d.unobserved, vec![Unobserved { hop: Hop::ClientAck, reason: "HTTP/2 client".into() }]);
    assert!(d.verdict.contains("client_ack: HTTP/2 client"), "{}", d.verdict);

    let ups: Vec<f64> = (0..65).map(|i| t_up(&r, i)).collect();
    let flush = move |i: usize| ups[(i / 13) * 13 + 12] + 3.0;
    let d = diagnose(&with_browser(r, &flush, &|i| flush(i) + 12.0, 0.8, vec![])).unwrap();
    assert_eq!(d.kind, VerdictKind::BetweenProxyAndBrowser, "{d:#?}");
}

#[test]
fn without_browser_data_only_proxy_hops_are_judged() {
    let d = diagnose(&record(30)).unwrap();
    assert_eq!(d.kind, VerdictKind::NoRebuffering);
    assert_eq!(d.hops.iter().map(|h| h.hop).collect::<Vec<_>>(), [Hop::Handoff, Hop::ClientAck]);
    assert!(d.verdict.contains("browser_arrival: no browser probe report"), "{}", d.verdict);
}

#[test]
fn one_event_is_not_enough_to_judge() {
    let d = diagnose(&record(1)).unwrap();
    assert_eq!(d.kind, VerdictKind::InsufficientData);
    assert_eq!(d.hop, None);
    assert!(d.hops.iter().all(|h| !h.rebuffers));
    assert!(d.verdict.contains("1 aligned answer event,"), "{}", d.verdict);
}

#[test]
fn no_answer_text_means_no_diagnosis() {
    let mut r = record(3);
    r.analysis = None;
    assert!(diagnose(&r).is_none());
    let mut r = record(3);
    r.analysis.as_mut().unwrap().events.clear();
    assert!(diagnose(&r).is_none());
}

#[test]
fn clock_uncertainty_raises_the_browser_threshold_and_offsets_cancel() {
    // A constant 400 ms clock error is latency, not re-buffering.
    let r = record(40);
    let ups: Vec<f64> = (0..40).map(|i| t_up(&r, i)).collect();
    let u2 = ups.clone();
    let d = diagnose(&with_browser(r.clone(), &|i| ups[i] + 400.0, &|i| u2[i] + 410.0, 0.5, vec![])).unwrap();
    assert_eq!(d.kind, VerdictKind::NoRebuffering, "{d:#?}");

    // Every other pair of chunks held 120 ms: re-buffering with a precise clock, within the
    // uncertainty of a poor one.
    let ups: Vec<f64> = (0..40).map(|i| t_up(&r, i)).collect();
    let arrival = move |i: usize| ups[i] + if i % 4 < 2 { 120.0 } else { 0.0 };
    let d = diagnose(&with_browser(r.clone(), &arrival, &|i| arrival(i) + 10.0, 1.0, vec![])).unwrap();
    assert_eq!(d.kind, VerdictKind::BetweenProxyAndBrowser, "{d:#?}");
    let d = diagnose(&with_browser(r, &arrival, &|i| arrival(i) + 10.0, 40.0, vec![])).unwrap();
    assert_eq!(d.kind, VerdictKind::NoRebuffering, "{d:#?}");
    assert!((hop(&d, Hop::BrowserArrival).hold_threshold_ms - (HOLD_MS + 40.0)).abs() < 1e-9);
}

#[test]
fn diagnosis_round_trips_through_json() {
    let d = diagnose(&smooth_browser(record(10))).unwrap();
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(json["kind"], "no_rebuffering");
    assert_eq!(json["hops"][1]["hop"], "client_ack");
    let back: Diagnosis = serde_json::from_value(json).unwrap();
    assert_eq!(back, d);
}

/// A chain: `egress` is `record(n)` (the provider's stream, 50 ms after the ingress t0); the
/// ingress record carries the same events, chunk i arriving from the app at `app_out(i)` ms since
/// the ingress t0, handed off 0.1 ms and acknowledged 0.5 ms later.
fn chain(n: usize, app_out: &dyn Fn(&Record, usize) -> f64) -> (Record, Record) {
    let mut egress = record(n);
    egress.request_id = "egress0000000000000000000".into();
    egress.span_id = "1111111111111111".into();
    egress.parent_span_id = Some("b7ad6b7169203331".into());
    egress.timeline.t0_unix_ns += 50_000_000;
    let mut ingress = record(n);
    for i in 0..n {
        let t = (app_out(&egress, i) * 1e6) as u64;
        let c = &mut ingress.timeline.chunks[i];
        c.t_up_ns = t;
        c.t_handoff_ns = Some(t + 100_000);
        c.t_acked_ns = Some(t + 500_000);
    }
    (ingress, egress)
}

/// The egress handoff of chunk i on the ingress clock (ms).
fn egress_handoff(egress: &Record, i: usize) -> f64 {
    egress.timeline.chunks[i].t_handoff_ns.unwrap() as f64 / 1e6 + 50.0
}

#[test]
fn chain_with_an_app_that_bursts_names_the_app() {
    // The app holds 8 events, then writes them together (25 ms apart upstream: holds up to 175 ms).
    let (ingress, egress) = chain(64, &|e, i| egress_handoff(e, (i / 8) * 8 + 7) + 3.0);
    let d = diagnose_chain(&ingress, &egress).unwrap();
    assert_eq!(d.kind, VerdictKind::InApp, "{d:#?}");
    assert_eq!(d.hop, Some(Hop::App));
    assert!(
        d.verdict.starts_with("in the app (between tokentap's egress handoff and its ingress arrival): "),
        "{}",
        d.verdict
    );
    let order: Vec<Hop> = d.hops.iter().map(|h| h.hop).collect();
    assert_eq!(order, [Hop::EgressHandoff, Hop::App, Hop::Handoff, Hop::ClientAck]);
    let app = hop(&d, Hop::App);
    assert_eq!(app.bursts, 8);
    // Holds 175, 150, 125, 100 ms of each 8 reach the 100 ms threshold: half the text.
    assert!((app.held_fraction - 0.5).abs() < 1e-9, "{app:#?}");
    assert_eq!(app.largest_burst.as_ref().unwrap().chars, 40);
    assert!((app.hold_max_ms - 175.0).abs() < 1e-6, "{app:#?}");
    // The provider's arrival is the chain's upstream: the egress hop adds 0.1 ms, nothing held.
    let egress_hop = hop(&d, Hop::EgressHandoff);
    assert!(!egress_hop.rebuffers && (egress_hop.added_ms.p50 - 0.1).abs() < 1e-6, "{egress_hop:#?}");
    // Handed off and acknowledged in step with the app's output: nothing held after it.
    assert!(!hop(&d, Hop::Handoff).rebuffers && !hop(&d, Hop::ClientAck).rebuffers);
    assert_eq!(d.unobserved.iter().map(|u| u.hop).collect::<Vec<_>>(), [Hop::BrowserArrival, Hop::Paint]);
    // The ingress record alone sees the app's bursts as its upstream: nothing to blame.
    assert_eq!(diagnose(&ingress).unwrap().kind, VerdictKind::NoRebuffering);
}

#[test]
fn chain_with_an_app_that_streams_has_no_rebuffering() {
    let (ingress, egress) = chain(40, &|e, i| egress_handoff(e, i) + 2.0 + (i % 3) as f64);
    let d = diagnose_chain(&ingress, &egress).unwrap();
    assert_eq!(d.kind, VerdictKind::NoRebuffering, "{d:#?}");
    assert!(
        d.verdict.starts_with("no re-buffering (hops observed: egress_handoff, app, handoff, client_ack)"),
        "{}",
        d.verdict
    );
    assert_eq!(d.events, 40);
    // 50 ms between the two t0s, 0.1 ms egress handoff, 2–4 ms in the app.
    let app = hop(&d, Hop::App);
    assert!((2.1..=4.1 + 1e-6).contains(&app.delay_ms.p50) && !app.rebuffers, "{app:#?}");
}

#[test]
fn chain_aligns_by_characters_and_drops_text_the_provider_did_not_send() {
    // The app merges every two provider events into one and appends text of its own at the end.
    let mut egress = record(10);
    egress.request_id = "egress0000000000000000000".into();
    let mut ingress = record(6);
    let analysis = ingress.analysis.as_mut().unwrap();
    let mut cum = 0;
    for e in analysis.events.iter_mut().filter(|e| e.class == EventClass::Answer) {
        e.chars = 10;
        cum += 10;
        e.answer_chars_cum = cum;
    }
    let d = diagnose_chain(&ingress, &egress).unwrap();
    // 50 provider characters cover five 10-character ingress events; the sixth is the app's own.
    assert_eq!((d.events, d.answer_chars), (5, 50));
    let app = hop(&d, Hop::App);
    // Ingress event k (at 100 + 25k ms) takes the time of provider event 2k+1 (100 + 25(2k+1) ms).
    assert_eq!(app.events, 5);
    assert!((app.delay_ms.max + ITL_MS).abs() < 1e-6, "{app:#?}");
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(json["hops"][0]["hop"], "egress_handoff");
    assert_eq!(json["hops"][1]["hop"], "app");
}

#[test]
fn chained_records_without_answer_text_are_not_diagnosed() {
    let (ingress, mut egress) = chain(4, &|e, i| egress_handoff(e, i) + 1.0);
    egress.analysis = None;
    assert!(diagnose_chain(&ingress, &egress).is_none());
}

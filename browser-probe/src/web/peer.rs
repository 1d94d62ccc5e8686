//! The `window.RTCPeerConnection` wrapper: a peer connection is watched from its creation and
//! joins the turn of the request that carried its SDP offer (the first tracked request that
//! started after the local offer was set, found when the remote answer is set), whose report
//! then waits for the connection's end.
//!
//! Off the page's critical path: one interval timer for all connections reads each audio
//! receiver's `getSynchronizationSources()` (synchronous, cheap) every [`TICK_MS`] and calls
//! `getStats()` every [`STATS_EVERY`] ticks (libwebrtc caches a report for 50 ms). A data channel
//! gets a `message` listener beside the app's (the probe reads the first characters of a text
//! message for its `type`); the app's own `createDataChannel` call is passed through unchanged.
//! The first tick that sees the connection's microphone track, and its remote audio track, taps
//! it (`tap`).

use std::cell::RefCell;

use js_sys::{Array, Function, JsString, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::EventTarget;

use super::tap::{self, Side};
use super::{get, now_ms, schedule_settle, with_probe};
use crate::realtime::{string_field, HEAD_CHARS};
use crate::webrtc::{Inbound, WebRtcSeen};

/// Timer period: the resolution of the `ssrc` onset method.
const TICK_MS: i32 = 20;
/// `getStats()` every this many ticks (60 ms).
const STATS_EVERY: u32 = 3;
/// The `inbound-rtp` members read, in [`Inbound::from_fields`]'s order.
const INBOUND_FIELDS: [&str; 12] = [
    "packetsReceived",
    "packetsLost",
    "jitter",
    "jitterBufferDelay",
    "jitterBufferTargetDelay",
    "jitterBufferEmittedCount",
    "totalSamplesReceived",
    "concealedSamples",
    "silentConcealedSamples",
    "concealmentEvents",
    "totalAudioEnergy",
    "totalSamplesDuration",
];
/// Peer connections watched at once (more are left alone).
const MAX_PEERS: usize = 8;

struct Peer {
    pc: JsValue,
    /// Where its measurements live: the turn of its offer, once known.
    turn: Option<u32>,
    /// Before the turn is known.
    pending: Option<WebRtcSeen>,
    /// When the local offer was set.
    offer_ms: Option<f64>,
    /// The last synchronization source timestamp read.
    last_ssrc_ms: f64,
    /// Its microphone track and its remote audio track were tapped.
    mic_tapped: bool,
    remote_tapped: bool,
}

#[derive(Default)]
struct Peers {
    list: Vec<Peer>,
    ticks: u32,
    interval: Option<i32>,
    on_tick: Option<Closure<dyn FnMut()>>,
}

thread_local! {
    static PEERS: RefCell<Peers> = RefCell::new(Peers::default());
}

fn method(target: &JsValue, name: &str) -> Option<Function> {
    get(target, name).dyn_into::<Function>().ok()
}

fn number(target: &JsValue, key: &str) -> f64 {
    get(target, key).as_f64().unwrap_or(0.0)
}

/// Replaces `window.RTCPeerConnection` with a `Proxy` whose `construct` watches the connection.
pub(super) fn install() {
    super::wrap_constructor("RTCPeerConnection", construct);
}

fn construct(target: Function, args: Array, new_target: Function) -> Result<JsValue, JsValue> {
    let pc = Reflect::construct_with_new_target(&target, &args, &new_target)?;
    let index = PEERS.with(|p| {
        let mut peers = p.borrow_mut();
        (peers.list.len() < MAX_PEERS).then(|| {
            peers.list.push(Peer {
                pc: pc.clone(),
                turn: None,
                pending: Some(WebRtcSeen::default()),
                offer_ms: None,
                last_ssrc_ms: 0.0,
                mic_tapped: false,
                remote_tapped: false,
            });
            peers.list.len() - 1
        })
    });
    if index.is_some() {
        listen(&pc);
        start_timer();
    }
    Ok(pc)
}

/// Runs `f` on the measurements of the peer at `pc`: its turn's, else the pending ones. `None`
/// when the turn was reported already (the peer is then forgotten).
fn with_seen(pc: &JsValue, f: &mut dyn FnMut(&mut WebRtcSeen)) {
    let Some(turn) = PEERS.with(|p| p.borrow().list.iter().find(|x| &x.pc == pc).map(|x| x.turn)) else { return };
    match turn {
        None => PEERS.with(|p| {
            if let Some(seen) = p.borrow_mut().list.iter_mut().find(|x| &x.pc == pc).and_then(|x| x.pending.as_mut()) {
                f(seen);
            }
        }),
        Some(id) => {
            let found = with_probe(|p| p.turns.get_mut(id).and_then(|t| t.webrtc.as_mut()).map(f).is_some());
            if !found {
                forget(pc);
            }
        }
    }
}

fn forget(pc: &JsValue) {
    PEERS.with(|p| p.borrow_mut().list.retain(|x| &x.pc != pc));
    tap::stop(pc);
}

/// The first audio track of `pc`'s senders (`getSenders`) or receivers (`getReceivers`).
fn audio_track(pc: &JsValue, list: &str) -> Option<JsValue> {
    let items = method(pc, list)?.call0(pc).ok()?;
    Array::from(&items)
        .iter()
        .map(|x| get(&x, "track"))
        .find(|track| get(track, "kind").as_string().as_deref() == Some("audio"))
}

/// Taps the microphone and the remote audio once each, when they first show.
fn tap_tracks(pc: &JsValue) {
    let Some((mic, remote)) =
        PEERS.with(|p| p.borrow().list.iter().find(|x| &x.pc == pc).map(|x| (x.mic_tapped, x.remote_tapped)))
    else {
        return;
    };
    for (side, done, list) in [(Side::Mic, mic, "getSenders"), (Side::Remote, remote, "getReceivers")] {
        if done {
            continue;
        }
        let Some(track) = audio_track(pc, list) else { continue };
        PEERS.with(|p| {
            if let Some(peer) = p.borrow_mut().list.iter_mut().find(|x| &x.pc == pc) {
                match side {
                    Side::Mic => peer.mic_tapped = true,
                    Side::Remote => peer.remote_tapped = true,
                }
            }
        });
        tap::start(pc.clone(), track, side, with_seen);
    }
}

/// Listeners on the connection: the signalling state (which request carried the offer) and data
/// channels, created by the app (`createDataChannel`, passed through) or by the remote peer.
fn listen(pc: &JsValue) {
    let target: &EventTarget = pc.unchecked_ref();
    let watched = pc.clone();
    let on_signalling = Closure::<dyn FnMut()>::new(move || signalling(&watched));
    let _ = target.add_event_listener_with_callback("signalingstatechange", on_signalling.as_ref().unchecked_ref());
    on_signalling.forget();
    let watched = pc.clone();
    let on_channel =
        Closure::<dyn FnMut(JsValue)>::new(move |event: JsValue| watch_channel(&watched, &get(&event, "channel")));
    let _ = target.add_event_listener_with_callback("datachannel", on_channel.as_ref().unchecked_ref());
    on_channel.forget();
    if let Some(create) = method(pc, "createDataChannel") {
        let watched = pc.clone();
        let wrapper = Closure::<dyn FnMut(JsValue, JsValue) -> Result<JsValue, JsValue>>::new(
            move |label: JsValue, options: JsValue| {
                let channel = create.call2(&watched, &label, &options)?;
                watch_channel(&watched, &channel);
                Ok(channel)
            },
        );
        let _ = Reflect::set(pc, &"createDataChannel".into(), wrapper.as_ref());
        wrapper.forget();
    }
}

fn signalling(pc: &JsValue) {
    let state = get(pc, "signalingState").as_string().unwrap_or_default();
    let now = now_ms();
    PEERS.with(|p| {
        let mut peers = p.borrow_mut();
        let Some(peer) = peers.list.iter_mut().find(|x| &x.pc == pc) else { return };
        if state == "have-local-offer" {
            peer.offer_ms = Some(now);
        } else if state == "stable" && peer.turn.is_none() {
            let Some(offer_ms) = peer.offer_ms else { return };
            let attached = with_probe(|probe| {
                let turn = probe.turns.first_started_after(offer_ms)?;
                turn.webrtc = peer.pending.take();
                Some(turn.id)
            });
            peer.turn = attached;
        }
    });
}

fn watch_channel(pc: &JsValue, channel: &JsValue) {
    let Some(target) = channel.dyn_ref::<EventTarget>() else { return };
    let watched = pc.clone();
    let on_message = Closure::<dyn FnMut(JsValue)>::new(move |event: JsValue| {
        let t_ms = now_ms();
        let Some(text) = get(&event, "data").dyn_into::<JsString>().ok() else { return };
        let head: String = text.slice(0, HEAD_CHARS).into();
        if let Some(name) = string_field(&head, "type") {
            with_seen(&watched, &mut |s| s.event(t_ms, name));
        }
    });
    let _ = target.add_event_listener_with_callback("message", on_message.as_ref().unchecked_ref());
    on_message.forget();
}

fn start_timer() {
    let window = with_probe(|p| p.window.clone());
    PEERS.with(|p| {
        let mut peers = p.borrow_mut();
        if peers.interval.is_some() {
            return;
        }
        let callback = peers.on_tick.get_or_insert_with(|| Closure::<dyn FnMut()>::new(tick));
        let handle = window
            .set_interval_with_callback_and_timeout_and_arguments_0(callback.as_ref().unchecked_ref(), TICK_MS)
            .ok();
        peers.interval = handle;
    });
}

fn tick() {
    let (pcs, stats) = PEERS.with(|p| {
        let mut peers = p.borrow_mut();
        peers.ticks = peers.ticks.wrapping_add(1);
        let pcs: Vec<JsValue> = peers.list.iter().map(|x| x.pc.clone()).collect();
        (pcs, peers.ticks % STATS_EVERY == 0)
    });
    if pcs.is_empty() {
        let window = with_probe(|p| p.window.clone());
        PEERS.with(|p| {
            if let Some(handle) = p.borrow_mut().interval.take() {
                window.clear_interval_with_handle(handle);
            }
        });
        return;
    }
    for pc in pcs {
        let state = get(&pc, "connectionState").as_string().unwrap_or_default();
        let now = now_ms();
        if state == "closed" || state == "failed" {
            with_seen(&pc, &mut |s| s.close(now));
            forget(&pc);
            schedule_settle();
            continue;
        }
        if state == "connected" {
            with_seen(&pc, &mut |s| {
                s.connected_ms.get_or_insert(now);
            });
        }
        tap_tracks(&pc);
        read_sources(&pc);
        if stats {
            read_stats(pc);
        }
    }
}

/// The newest frame each remote audio receiver delivered, with its sender-reported level.
fn read_sources(pc: &JsValue) {
    let Some(receivers) = method(pc, "getReceivers").and_then(|f| f.call0(pc).ok()) else { return };
    let time_origin = with_probe(|p| p.time_origin);
    for receiver in Array::from(&receivers).iter() {
        if get(&get(&receiver, "track"), "kind").as_string().as_deref() != Some("audio") {
            continue;
        }
        let Some(sources) = method(&receiver, "getSynchronizationSources").and_then(|f| f.call0(&receiver).ok()) else {
            continue;
        };
        let source = Array::from(&sources).get(0);
        let (Some(mut t_ms), Some(level)) = (get(&source, "timestamp").as_f64(), get(&source, "audioLevel").as_f64())
        else {
            continue;
        };
        // The spec's time is on the performance timeline (timeOrigin + now); an older
        // implementation's relative value is moved there.
        if t_ms < 1e12 {
            t_ms += time_origin;
        }
        let fresh = PEERS.with(|p| {
            let mut peers = p.borrow_mut();
            let peer = peers.list.iter_mut().find(|x| &x.pc == pc)?;
            let fresh = t_ms > peer.last_ssrc_ms;
            peer.last_ssrc_ms = t_ms;
            Some(fresh)
        });
        if fresh == Some(true) {
            with_seen(pc, &mut |s| s.ssrc(t_ms, level));
        }
        // The first remote audio track only.
        break;
    }
}

/// One `getStats()` reading: the first remote audio track, the playout, the microphone and the
/// nominated candidate pair.
fn read_stats(pc: JsValue) {
    let Some(promise) = method(&pc, "getStats").and_then(|f| f.call0(&pc).ok()) else { return };
    wasm_bindgen_futures::spawn_local(async move {
        let Ok(report) = wasm_bindgen_futures::JsFuture::from(js_sys::Promise::from(promise)).await else { return };
        let t_ms = now_ms();
        let Some(values) = method(&report, "values").and_then(|f| f.call0(&report).ok()) else { return };
        let Ok(Some(iter)) = js_sys::try_iter(&values) else { return };
        let mut inbound: Option<Inbound> = None;
        let (mut playout, mut local, mut rtt) = (None, None, None);
        for stat in iter.flatten() {
            let kind = get(&stat, "kind").as_string();
            match get(&stat, "type").as_string().as_deref() {
                Some("inbound-rtp") if kind.as_deref() == Some("audio") && inbound.is_none() => {
                    let v: Vec<f64> = INBOUND_FIELDS.iter().map(|k| number(&stat, k)).collect();
                    inbound = Some(Inbound::from_fields(&v));
                }
                Some("media-playout") => {
                    playout = Some((number(&stat, "totalPlayoutDelay"), number(&stat, "totalSamplesCount")));
                }
                Some("media-source") if kind.as_deref() == Some("audio") => {
                    local = Some((number(&stat, "totalAudioEnergy"), number(&stat, "totalSamplesDuration")));
                }
                Some("candidate-pair") if get(&stat, "nominated").is_truthy() => {
                    rtt = get(&stat, "currentRoundTripTime").as_f64().or(rtt);
                }
                _ => {}
            }
        }
        with_seen(&pc, &mut |s| {
            if let Some(mut inbound) = inbound {
                if let Some((delay, samples)) = playout {
                    inbound.playout_delay_s = delay;
                    inbound.playout_samples = samples;
                }
                s.inbound(t_ms, inbound, rtt);
            }
            if let Some((energy, duration)) = local {
                s.local(t_ms, energy, duration);
            }
        });
    });
}

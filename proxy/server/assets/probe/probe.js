// tokentap browser probe: the ES module apps import (served by tokentap at /_tokentap/probe/probe.js).
// It loads the wasm next to it and forwards to it; calls made before init() has loaded the wasm are
// queued (marks keep the time they were made). Usage: browser-probe/README.md in tokentap's repository.
import load, * as probe from "./tokentap_probe.js";

const queued = [];
let loading = null;
let ready = false;

function whenReady(call) {
  if (ready) call();
  else queued.push(call);
}

/** Loads the probe and starts it. Resolves once the clock offset to tokentap is measured. */
export async function init(options = {}) {
  loading ??= load({ module_or_path: new URL("./tokentap_probe_bg.wasm", import.meta.url) }).then(() => {
    ready = true;
    for (const call of queued.splice(0)) call();
  });
  await loading;
  return probe.init(options);
}

/** Stamps the text paints of `element` (the element that shows the answer). */
export function observe(element) {
  whenReady(() => probe.observe(element));
}

/**
 * Records a user-level moment (`user_send`, `user_speech_end`, ...) at the time of the call, or at
 * `tMs` (wall-clock ms, `performance.timeOrigin + performance.now()` of the moment) when given,
 * e.g. the last loud frame an app's own end-of-speech detection saw.
 */
export function mark(name, tMs) {
  const t = Number.isFinite(tMs) ? tMs : performance.timeOrigin + performance.now();
  whenReady(() => probe.mark(String(name), t));
}

/**
 * Records when audio played through `audioContext` becomes audible. `response` (optional) is the
 * Response the probe's fetch returned for the answer being played, or in a realtime session the
 * response id (`response_id` of its audio deltas).
 */
export function trackAudio(audioContext, startContextTime, response) {
  whenReady(() => probe.trackAudio(audioContext, startContextTime, response));
}

/**
 * Records a buffer the app scheduled on `audioContext` at context time `when` for `duration`
 * seconds, playing `response`'s answer (a Response, or a realtime response id): the playback's
 * start, its underruns and its end.
 */
export function audioScheduled(audioContext, when, duration, response) {
  whenReady(() => probe.audioScheduled(audioContext, when, duration, response));
}

/**
 * The app stopped playing `response`'s answer (barge-in): before its end, it was interrupted. In a
 * realtime session a response id stops that response's playback only.
 */
export function stopAudio(response) {
  whenReady(() => probe.stopAudio(response));
}

/** Records when a media element starts playing, runs dry, ends or is stopped early. */
export function observeMedia(element, response) {
  whenReady(() => probe.observeMedia(element, response));
}

/** Sends the reports of all turns now, even unfinished ones. */
export function flush() {
  if (ready) probe.flush();
}

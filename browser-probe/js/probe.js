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

/** Records a user-level moment (`user_send`, `user_speech_end`, ...) at the time of the call. */
export function mark(name) {
  const t = performance.timeOrigin + performance.now();
  whenReady(() => probe.mark(String(name), t));
}

/** Records when audio played through `audioContext` becomes audible. */
export function trackAudio(audioContext, startContextTime) {
  whenReady(() => probe.trackAudio(audioContext, startContextTime));
}

/** Records when a media element starts playing. */
export function observeMedia(element) {
  whenReady(() => probe.observeMedia(element));
}

/** Sends the reports of all turns now, even unfinished ones. */
export function flush() {
  if (ready) probe.flush();
}

// tokentap browser probe: the ES module apps import (served by tokentap at /_tokentap/probe/probe.js).
// It loads the wasm next to it and forwards to it; calls made before init() has loaded the wasm are
// queued (marks keep the time they were made). Usage: browser-probe/README.md in tokentap's repository.
import load, * as probe from "./tokentap_probe.js";

// The AudioWorklet tap on peer connections' audio tracks, handed to the wasm (src/web/tap.rs).
const TAP_MODULE = `registerProcessor("tokentap-tap",class extends AudioWorkletProcessor{
constructor(o){super();const p=o.processorOptions;this.l=p.level;this.h=p.hangoverMs*sampleRate/1e3;
this.w=Math.round(sampleRate/100);this.n=0;this.e=0;this.a=-1;this.b=-1;this.on=false;this.last=0}
process(i){const c=i[0]&&i[0][0];if(c)for(let k=0;k<c.length;k++){const x=c[k],f=currentFrame+k;this.e+=x*x;
if(x>this.l||x<-this.l){if(this.a<0)this.a=f;this.b=f}if(++this.n==this.w){const t=(currentFrame+c.length)/sampleRate;
if(this.e/this.n>this.l*this.l){if(!this.on){this.on=true;this.port.postMessage([1,this.a/sampleRate,t])}this.last=this.b+1}
else if(this.on&&f+1-this.last>=this.h){this.on=false;this.port.postMessage([0,this.last/sampleRate,t])}
this.n=0;this.e=0;this.a=-1}}return true}})`;
let tapContext = null;
let tapModule = null;
let taps = 0;

// Resolves to a function that stops the tap, or to why there is none.
async function tapTrack(track, level, hangoverMs, heard) {
  try {
    if (!tapContext) {
      if (typeof AudioWorkletNode !== "function") return "unavailable";
      tapContext = new AudioContext();
      const url = URL.createObjectURL(new Blob([TAP_MODULE], { type: "text/javascript" }));
      tapModule = tapContext.audioWorklet.addModule(url).finally(() => URL.revokeObjectURL(url));
    }
    const context = tapContext;
    await tapModule;
    if (context.state !== "running") {
      await Promise.race([context.resume(), new Promise((r) => setTimeout(r, 1000))]);
      if (context.state !== "running") return "suspended";
    }
    const source = context.createMediaStreamSource(new MediaStream([track]));
    const node = new AudioWorkletNode(context, "tokentap-tap",
      { numberOfOutputs: 1, outputChannelCount: [1], processorOptions: { level, hangoverMs } });
    // The track reaches the graph through a FIFO about one output buffer deep (measured).
    const lagS = context.outputLatency || 0;
    node.port.onmessage = ({ data: [audible, sampleS, nowS] }) =>
      heard(audible, performance.timeOrigin + performance.now() - (Math.max(0, nowS - sampleS) + lagS) * 1000);
    source.connect(node);
    node.connect(context.destination);
    taps++;
    return () => {
      node.port.onmessage = null;
      source.disconnect();
      node.disconnect();
      if (--taps === 0 && tapContext === context) {
        tapContext = null;
        context.close();
      }
    };
  } catch {
    return "blocked";
  }
}

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
  return probe.init(options, tapTrack);
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

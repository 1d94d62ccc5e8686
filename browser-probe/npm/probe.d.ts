// Types of tokentap's browser probe (probe.js). What each call measures: README.md here, and
// browser-probe/README.md in tokentap's repository.

/** Options of {@link init}. Calling init again updates `endpoint`, `trackFetch` and `trackWebSocket`. */
export interface ProbeOptions {
  /** Where reports go (default "/_tokentap/v1/probe"): tokentap's ingest, e.g. "http://tokentap:8787/_tokentap/v1/probe". */
  endpoint?: string;
  /** tokentap's clock endpoint (default "/_tokentap/v1/clock"); null skips the clock round trips. */
  clockUrl?: string | null;
  /**
   * Which `fetch` and `EventSource` streams to track, by their absolute URL. Default: every
   * same-origin one. A tracked fetch gets a `traceparent` header; an EventSource, its trace
   * context in the `tokentap_traceparent` query parameter.
   */
  trackFetch?: (url: string) => boolean;
  /**
   * Which WebSockets to track, by their absolute URL. Default: sockets to the page's host whose
   * path contains "realtime" (voice sessions). A tracked socket whose path does not name a realtime
   * endpoint is read as the app's own text relay: each text message is one read of the answer.
   */
  trackWebSocket?: (url: string) => boolean;
}

/** What a playback call names: the Response the probe's fetch returned, or a realtime response id. */
export type AnswerRef = Response | string;

/**
 * Loads the probe's wasm (next to this module: `new URL("./tokentap_probe_bg.wasm", import.meta.url)`)
 * and starts it: wraps `fetch`, `EventSource` and `WebSocket`, watches long frames, reports on
 * `pagehide`. Resolves once the clock offset to tokentap is measured; tracking starts at once.
 */
export function init(options?: ProbeOptions): Promise<void>;

/** Stamps the text paints of `element` (the element that shows the answer). */
export function observe(element: Element): void;

/** Records a user-level moment ("user_send", "user_speech_end", …) now, or at `tMs` (wall-clock ms). */
export function mark(name: string, tMs?: number): void;

/** Records when audio played through `audioContext` becomes audible. */
export function trackAudio(audioContext: AudioContext, startContextTime?: number, response?: AnswerRef): void;

/** Records a buffer the app scheduled on `audioContext` at `when` for `duration` seconds. */
export function audioScheduled(audioContext: AudioContext, when: number, duration: number, response?: AnswerRef): void;

/** The app stopped playing `response`'s answer (barge-in). */
export function stopAudio(response?: AnswerRef): void;

/** Records when a media element starts playing, runs dry, ends or is stopped early. */
export function observeMedia(element: HTMLMediaElement, response?: AnswerRef): void;

/** Sends the reports of all turns now, even unfinished ones. */
export function flush(): void;

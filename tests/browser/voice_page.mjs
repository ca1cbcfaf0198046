// Drives the chat page's voice panel in Debian's headless Chromium (playwright-core) with a
// microphone this script controls, and measures in the page what it plays.
//
//   node voice_page.mjs '{"url": "http://127.0.0.1:8080", "pacedUrl": "http://127.0.0.1:8081", "screenshotDir": "/tmp/x"}'
//
// `url` serves the demo agent on the scripted model (it sends its 0.5 s spoken answer in about
// 80 ms); `pacedUrl` serves tests/browser/voice_apps (a 3 s answer that streams while it plays).
//
// The fake microphone (an init script, `installProbes`): `getUserMedia` answers with a stream
// made in the page's own AudioContext: a 300 Hz "voice" and a 440 Hz "echo", each behind a gain
// the script opens and closes, so the moment the user starts speaking is known in the page's
// clock. The same script observes, without touching the page's code: the microphone's frames as
// the page's worklet delivers them (and can hold them back), the live frames the page sends and
// receives, the audio buffers it schedules and stops, its output AnalyserNode, and when the voice
// panel says "on" and enables "Hold to talk".
//
// Steps (each records what it saw under its name):
//   firstFrame     push-to-talk; getUserMedia is held: the panel is not "on", "Hold to talk" is
//                  disabled; then the microphone opens but its frames are held back: still not;
//                  then they flow: "on" and enabled, after the first frame; a quick press-to-talk
//                  right away reaches the gateway whole
//   echo           hands-free: while an answer plays, the microphone carries a faint copy of it
//                  (what echo cancellation leaves): the answer plays to its end, no interrupt
//   bargeInDone    hands-free, scripted model: the user speaks over the answer after the gateway
//                  has sent all of it (finish: stop): the page is silent within 100 ms, sends
//                  live-interrupt, marks the answer interrupted; the utterance is heard
//   bargeInStreaming  the same against the paced model while the gateway still streams the
//                  answer: also the gateway ends the turn `interrupted`, and nothing more of it
//                  plays
// Any console error, page error or /api/ response >= 400 fails the run. Every wait is a condition
// with a timeout; there are no fixed sleeps.
//
// Prints progress on stderr and one JSON line on stdout: {ok, failures, steps, axe, ...}.
// Exit code 0 only when ok.

import { mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { launchChromium, screenshotter, runAndReport } from './browser.mjs';

const config = JSON.parse(process.argv[2] ?? '{}');
const BASE_URL = String(config.url ?? 'http://127.0.0.1:8080').replace(/\/$/, '');
const PACED_URL = config.pacedUrl ? String(config.pacedUrl).replace(/\/$/, '') : null;
const SCREENSHOT_DIR = config.screenshotDir ?? path.resolve('screenshots');
const EXECUTABLE = config.executablePath ?? '/usr/bin/chromium';
const STEP_TIMEOUT_MS = config.stepTimeoutMs ?? 10_000;
const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

const started = Date.now();
const log = line => process.stderr.write(`[voice_page ${((Date.now() - started) / 1000).toFixed(1)}s] ${line}\n`);

const failures = [];
const consoleLines = [];
const steps = {};
const result = { ok: false, failures, steps, axe: {}, console: consoleLines, screenshots: [] };

function fail(message) {
  log(`FAIL: ${message}`);
  failures.push(message);
}

// --- in the page: the fake microphone and the probes ------------------------------------------

/** Runs in the page before its own scripts (`addInitScript`); everything it learns is in `window.voiceProbe`. */
function installProbes() {
  const probe = {
    context: null, // the page's AudioContext
    analyser: null, // the page's output (the AnalyserNode connected to the speakers)
    voice: null, // GainNodes of the fake microphone
    echo: null,
    speechAt: null, // performance.now() when the voice was switched on
    speechEndsAt: null,
    // getUserMedia: calls, and a gate that holds it while set.
    askedAt: [],
    gate: null,
    open: null,
    // The microphone's frames as the worklet posts them to the page.
    holdFrames: false,
    heldBack: 0,
    frames: 0, // delivered since the last getUserMedia
    firstFrameAt: null,
    lastFrameAt: null,
    firstVoiceFrameAt: null,
    // The live socket: what the page sends and receives.
    sent: [], // {type, at} (live-* frames), {type: 'audio', at, rms}
    turns: [], // {messageId, startAt, pcm, finishReason, finishAt}
    // What the page plays.
    sources: [], // {node, when, duration, startedAt, stoppedAt}
    // The voice panel.
    statusLog: [], // {status, at, frames}
    talkLog: [], // {enabled, at, frames}
  };
  window.voiceProbe = probe;
  const rmsOf = samples => {
    let sum = 0;
    for (const s of samples) sum += s * s;
    return samples.length ? Math.sqrt(sum / samples.length) : 0;
  };
  const pcmRms = buffer => {
    const pcm = new Int16Array(buffer);
    let sum = 0;
    for (const s of pcm) sum += (s / 32768) ** 2;
    return pcm.length ? Math.sqrt(sum / pcm.length) : 0;
  };

  // The page's AudioContext and its output analyser.
  const PageAudioContext = window.AudioContext;
  window.AudioContext = class extends PageAudioContext {
    constructor(...args) {
      super(...args);
      probe.context = this;
    }
  };
  const connect = AudioNode.prototype.connect;
  AudioNode.prototype.connect = function (target, ...rest) {
    if (this instanceof AnalyserNode && target instanceof AudioDestinationNode) probe.analyser = this;
    return connect.call(this, target, ...rest);
  };

  // What the page plays: every buffer scheduled, and when it was stopped.
  const start = AudioBufferSourceNode.prototype.start;
  AudioBufferSourceNode.prototype.start = function (when = 0, ...rest) {
    const entry = { node: this, when: Math.max(when, this.context.currentTime), duration: this.buffer?.duration ?? 0, startedAt: performance.now(), stoppedAt: null };
    probe.sources.push(entry);
    return start.call(this, when, ...rest);
  };
  const stop = AudioBufferSourceNode.prototype.stop;
  AudioBufferSourceNode.prototype.stop = function (...args) {
    const entry = probe.sources.find(e => e.node === this);
    if (entry && entry.stoppedAt == null) entry.stoppedAt = performance.now();
    return stop.apply(this, args);
  };

  /** RMS of the last ~5 ms the page's output played. */
  probe.outputLevel = () => {
    if (probe.analyser == null) return 0;
    const samples = new Float32Array(probe.analyser.fftSize);
    probe.analyser.getFloatTimeDomainData(samples);
    return rmsOf(samples.subarray(samples.length - 256));
  };
  /** Milliseconds of scheduled audio not yet played (buffers stopped count as played). */
  probe.remainingMs = () => {
    const now = probe.context?.currentTime ?? 0;
    const ends = probe.sources.filter(e => e.stoppedAt == null).map(e => e.when + e.duration);
    return Math.max(0, (Math.max(now, ...ends) - now) * 1000);
  };

  // The fake microphone: a stream from the page's own AudioContext; silent until `speak`.
  navigator.mediaDevices.getUserMedia = async () => {
    probe.askedAt.push(performance.now());
    probe.frames = 0;
    probe.firstFrameAt = null;
    if (probe.gate) await probe.gate;
    const context = probe.context;
    const destination = context.createMediaStreamDestination();
    const tone = hz => {
      const gain = new GainNode(context, { gain: 0 });
      const oscillator = new OscillatorNode(context, { frequency: hz });
      oscillator.connect(gain).connect(destination);
      oscillator.start();
      return gain;
    };
    probe.voice = tone(300);
    probe.echo = tone(440);
    return destination.stream;
  };
  /** The user speaks for `ms` (a 300 Hz tone at `level`); returns when it started (performance.now()). */
  probe.speak = (ms, level = 0.5) => {
    const { gain } = probe.voice;
    const now = probe.context.currentTime;
    gain.cancelScheduledValues(now);
    gain.setValueAtTime(level, now);
    gain.setValueAtTime(0, now + ms / 1000);
    probe.speechAt = performance.now();
    probe.speechEndsAt = probe.speechAt + ms;
    probe.firstVoiceFrameAt = null;
    return probe.speechAt;
  };
  /** A faint copy of the answer (440 Hz at `level`), as echo cancellation leaves it, for `ms`. */
  probe.leak = (ms, level) => {
    const { gain } = probe.echo;
    const now = probe.context.currentTime;
    gain.cancelScheduledValues(now);
    gain.setValueAtTime(level, now);
    gain.setValueAtTime(0, now + ms / 1000);
  };
  probe.holdMicrophone = () => {
    probe.gate = new Promise(resolve => (probe.open = resolve));
  };
  probe.releaseMicrophone = () => {
    probe.gate = null;
    probe.open?.();
  };

  // The microphone's frames: the worklet's port messages (PCM16, 320 samples) as the page gets them.
  const onmessage = Object.getOwnPropertyDescriptor(MessagePort.prototype, 'onmessage');
  Object.defineProperty(MessagePort.prototype, 'onmessage', {
    configurable: true,
    enumerable: onmessage.enumerable,
    get() {
      return onmessage.get.call(this);
    },
    set(handler) {
      const tapped =
        typeof handler === 'function'
          ? function (event) {
              if (event.data instanceof ArrayBuffer && event.data.byteLength === 640) {
                if (probe.holdFrames) {
                  probe.heldBack += 1;
                  return undefined;
                }
                const at = performance.now();
                probe.frames += 1;
                probe.firstFrameAt ??= at;
                probe.lastFrameAt = at;
                if (probe.speechAt != null && probe.firstVoiceFrameAt == null && pcmRms(event.data) > 0.05) probe.firstVoiceFrameAt = at;
              }
              return handler.call(this, event);
            }
          : handler;
      onmessage.set.call(this, tapped);
    },
  });

  // The live socket (requestId "live"): frames sent and chunks received.
  const send = WebSocket.prototype.send;
  WebSocket.prototype.send = function (data) {
    const at = performance.now();
    if (typeof data === 'string') {
      const frame = JSON.parse(data);
      if (frame.requestId === 'live') probe.sent.push({ type: frame.type, at });
    } else if (data instanceof ArrayBuffer) {
      probe.sent.push({ type: 'audio', at, rms: pcmRms(data) });
    }
    return send.call(this, data);
  };
  const PageWebSocket = window.WebSocket;
  window.WebSocket = class extends PageWebSocket {
    constructor(...args) {
      super(...args);
      this.addEventListener('message', event => {
        if (typeof event.data !== 'string') return;
        const frame = JSON.parse(event.data);
        if (frame.requestId !== 'live' || frame.type !== 'chunk') return;
        const { chunk } = frame;
        const at = performance.now();
        if (chunk.type === 'start') probe.turns.push({ messageId: chunk.messageId, startAt: at, pcm: 0, finishReason: null, finishAt: null });
        const turn = probe.turns.at(-1);
        if (turn == null) return;
        if (chunk.type === 'data-pcm') turn.pcm += 1;
        if (chunk.type === 'finish') Object.assign(turn, { finishReason: chunk.finishReason ?? 'unknown', finishAt: at });
      });
    }
  };

  // The voice panel: when it says "on", when "Hold to talk" is enabled (and how many frames had come).
  new MutationObserver(() => {
    const status = document.querySelector('[data-testid="voice"]')?.dataset.status ?? null;
    if (status !== (probe.statusLog.at(-1)?.status ?? null)) probe.statusLog.push({ status, at: performance.now(), frames: probe.frames });
    const talk = document.querySelector('[data-testid="talk"]');
    const enabled = talk != null && !talk.disabled;
    if (enabled !== (probe.talkLog.at(-1)?.enabled ?? false)) probe.talkLog.push({ enabled, at: performance.now(), frames: probe.frames });
  }).observe(document, { subtree: true, childList: true, attributes: true, attributeFilter: ['data-status', 'disabled'] });

  /**
   * Speaks over the answer of a turn after the `after`-th: once it plays (the output is loud and
   * at least `minRemainingMs` of it is still to play) and the gateway has (`serverDone`) or has
   * not yet sent all of it. Then measures, polling every few ms, when the output is silent.
   */
  probe.speakOver = ({ after, serverDone, speakMs, minRemainingMs, timeoutMs }) =>
    new Promise((resolve, reject) => {
      const t0 = performance.now();
      const waiting = setInterval(() => {
        const turn = probe.turns.slice(after).find(t => t.pcm > 0);
        const elapsed = performance.now() - t0;
        if (elapsed > timeoutMs) {
          clearInterval(waiting);
          reject(new Error(`no answer to speak over within ${timeoutMs} ms: ${JSON.stringify({ turn, level: probe.outputLevel(), remainingMs: probe.remainingMs() })}`));
          return;
        }
        if (turn == null) return;
        const done = turn.finishReason != null;
        if (!serverDone && done) {
          clearInterval(waiting);
          reject(new Error(`the gateway finished the answer (${turn.finishReason}) before it could be spoken over`));
          return;
        }
        const level = probe.outputLevel();
        const remainingMs = probe.remainingMs();
        if (done !== serverDone || level < 0.02 || remainingMs < minRemainingMs) return;
        clearInterval(waiting);
        const speechAt = probe.speak(speakMs);
        const before = { messageId: turn.messageId, level, remainingMs, finishReasonBefore: turn.finishReason };
        const watching = setInterval(() => {
          const now = performance.now();
          if (probe.outputLevel() < 0.003) {
            clearInterval(watching);
            resolve({ ...before, speechAt, silentAt: now });
          } else if (now - speechAt > 2000) {
            clearInterval(watching);
            reject(new Error(`still playing 2 s after the user spoke: ${JSON.stringify({ ...before, level: probe.outputLevel() })}`));
          }
        }, 2);
      }, 4);
    });
}

// --- from the script ----------------------------------------------------------------------------

function watch(page) {
  page.on('console', message => {
    consoleLines.push(`${message.type()}: ${message.text()}`);
    if (message.type() === 'error') fail(`console error: ${message.text()}`);
  });
  page.on('pageerror', error => fail(`page error: ${error.stack ?? error.message}`));
  page.on('crash', () => fail('the page crashed'));
  page.on('response', response => {
    const { pathname } = new URL(response.url());
    if (pathname.startsWith('/api/') && response.status() >= 400) {
      fail(`${response.request().method()} ${pathname} answered ${response.status()}`);
    }
  });
}

const screenshot = screenshotter(SCREENSHOT_DIR, result);

async function axe(page, name) {
  await page.evaluate(AXE_SOURCE);
  const violations = await page.evaluate(async () => {
    const { violations } = await window.axe.run(document, { resultTypes: ['violations'] });
    return violations.map(v => ({ id: v.id, impact: v.impact, help: v.help, targets: v.nodes.map(n => n.target.join(' ')).slice(0, 5) }));
  });
  result.axe[name] = violations;
  log(`axe ${name}: ${violations.map(v => `${v.id} (${v.impact})`).join(', ') || 'no violations'}`);
}

const probe = (page, fn, arg) => page.evaluate(fn, arg);
const until = (page, fn, arg, label) =>
  page.waitForFunction(fn, arg, { timeout: STEP_TIMEOUT_MS, polling: 10 }).catch(error => {
    throw new Error(`${label}: ${error.message}`);
  });
const voiceStatus = page => page.getByTestId('voice').getAttribute('data-status');
const liveMessages = page => page.locator('[data-testid="message"][data-live]');

/** The panel as the user sees it now. */
async function panel(page) {
  const talk = page.getByTestId('talk');
  return {
    status: await voiceStatus(page),
    text: await page.getByTestId('voice-status').textContent(),
    talk: (await talk.count()) ? ((await talk.isDisabled()) ? 'disabled' : 'enabled') : 'absent',
  };
}

async function openPage(browser, url) {
  const context = await browser.newContext({ viewport: { width: 1100, height: 900 } });
  context.setDefaultTimeout(STEP_TIMEOUT_MS);
  await context.addInitScript(installProbes);
  const page = await context.newPage();
  watch(page);
  await page.goto(`${url}/`, { waitUntil: 'domcontentloaded' });
  await page.locator('[data-testid="status"][data-status="ready"]').waitFor();
  return { context, page };
}

async function startVoice(page, { handsFree }) {
  const box = page.getByTestId('hands-free');
  if ((await box.isChecked()) !== handsFree) await box.setChecked(handsFree);
  await page.getByTestId('voice-start').click();
}

async function stopVoice(page) {
  await page.getByTestId('voice-stop').click();
  await page.locator('[data-testid="voice"][data-status="off"]').waitFor();
}

/** The transcription "[N ms of audio]" of live message `index` once it is there; returns N. */
async function heardMs(page, index, label) {
  const transcription = liveMessages(page).nth(index).getByTestId('transcription').filter({ hasText: /\[\d+ ms of audio\]/ });
  await transcription.waitFor().catch(error => {
    throw new Error(`${label}: no "[N ms of audio]" in live message ${index} (${error.message})`);
  });
  return Number(/\[(\d+) ms of audio\]/.exec(await transcription.textContent())[1]);
}

/** The panel is "on" and "Hold to talk" enabled only once the microphone delivers audio. */
async function firstFrame(page) {
  const seen = (steps.firstFrame = {});
  await probe(page, () => window.voiceProbe.holdMicrophone());
  await startVoice(page, { handsFree: false });
  // The gateway has started the session and the page asks for the microphone: not "on" yet.
  await until(page, () => window.voiceProbe.askedAt.length === 1, null, 'getUserMedia called');
  seen.whileAsking = await panel(page);
  // The microphone opens, but delivers nothing yet.
  await probe(page, () => {
    window.voiceProbe.holdFrames = true;
    window.voiceProbe.releaseMicrophone();
  });
  await until(page, () => window.voiceProbe.heldBack >= 10, null, 'the worklet runs');
  seen.whileSilent = await panel(page);
  await screenshot(page, 'voice-opening');
  // Its frames flow: "on", and the button is enabled, after the first frame.
  await probe(page, () => (window.voiceProbe.holdFrames = false));
  await page.locator('[data-testid="voice"][data-status="on"]').waitFor();
  await page.locator('[data-testid="talk"]:not([disabled])').waitFor();
  Object.assign(seen, await probe(page, () => {
    const p = window.voiceProbe;
    const on = p.statusLog.find(e => e.status === 'on');
    const enabled = p.talkLog.find(e => e.enabled);
    return { framesWhenOn: on.frames, onAfterFirstFrameMs: on.at - p.firstFrameAt, framesWhenEnabled: enabled.frames, enabledAfterFirstFrameMs: enabled.at - p.firstFrameAt };
  }));
  seen.on = await panel(page);
  // A quick press-to-talk at once: all of it reaches the gateway.
  const index = await liveMessages(page).count();
  await page.getByTestId('talk').hover();
  await page.mouse.down();
  await page.locator('[data-testid="talk"][aria-pressed="true"]').waitFor();
  const spokenAt = await probe(page, () => window.voiceProbe.speak(400));
  await until(page, () => window.voiceProbe.lastFrameAt > window.voiceProbe.speechEndsAt + 60, null, 'the utterance was captured');
  await page.mouse.up();
  await page.locator('[data-testid="talk"][aria-pressed="false"]').waitFor();
  Object.assign(seen, await probe(page, spokenAt => {
    const sent = window.voiceProbe.sent;
    const start = sent.findLastIndex(f => f.type === 'live-activity-start');
    const end = sent.findIndex((f, i) => i > start && f.type === 'live-activity-end');
    const frames = sent.slice(start, end).filter(f => f.type === 'audio');
    return { quickSentMs: frames.length * 20, quickVoicedMs: frames.filter(f => f.at >= spokenAt && f.rms > 0.05).length * 20 };
  }, spokenAt));
  seen.quickHeardMs = await heardMs(page, index, 'quick press-to-talk');
  await stopVoice(page);
  log(`firstFrame: ${JSON.stringify(seen)}`);
}

/** What the page did around a barge-in that `speakOver` measured. */
async function afterBargeIn(page, timing) {
  return probe(page, timing => {
    const p = window.voiceProbe;
    const interrupt = p.sent.find(f => f.type === 'live-interrupt' && f.at >= timing.speechAt);
    const turnIndex = p.turns.findIndex(t => t.messageId === timing.messageId);
    const turn = p.turns[turnIndex];
    const next = p.turns[turnIndex + 1];
    const stops = p.sources.filter(e => e.stoppedAt != null && e.stoppedAt >= timing.speechAt).map(e => e.stoppedAt);
    const stoppedAt = stops.length ? Math.min(...stops) : null;
    // Audio scheduled after the cut and before the next turn began: the cut turn's rest.
    const late = p.sources.filter(e => stoppedAt != null && e.startedAt > stoppedAt && (next == null || e.startedAt < next.startAt));
    return {
      remainingMs: Math.round(timing.remainingMs),
      voiceFrameAfterMs: p.firstVoiceFrameAt == null ? null : p.firstVoiceFrameAt - timing.speechAt,
      interruptAfterMs: interrupt ? interrupt.at - timing.speechAt : null,
      stoppedAfterMs: stoppedAt == null ? null : stoppedAt - timing.speechAt,
      silentAfterMs: timing.silentAt - timing.speechAt,
      finishBefore: timing.finishReasonBefore,
      finishReason: turn.finishReason,
      finishAfterInterruptMs: turn.finishAt != null && interrupt ? turn.finishAt - interrupt.at : null,
      lateBuffers: late.length,
      interrupts: p.sent.filter(f => f.type === 'live-interrupt').length,
    };
  }, timing);
}

/** Hands-free: a faint copy of the answer on the microphone does not cut it. */
async function echo(page) {
  const seen = (steps.echo = {});
  await startVoice(page, { handsFree: true });
  await page.locator('[data-testid="voice"][data-status="on"]').waitFor();
  const { after, sourcesBefore } = await probe(page, () => ({ after: window.voiceProbe.turns.length, sourcesBefore: window.voiceProbe.sources.length }));
  const index = await liveMessages(page).count();
  await probe(page, () => window.voiceProbe.speak(600));
  // The answer starts playing: the microphone carries it at -50 dBFS for 1 s.
  await until(page, after => window.voiceProbe.turns.slice(after).some(t => t.pcm > 0) && window.voiceProbe.outputLevel() > 0.02, after, 'the answer plays');
  await probe(page, () => window.voiceProbe.leak(1000, 0.0045));
  await until(page, () => window.voiceProbe.remainingMs() === 0 && window.voiceProbe.outputLevel() < 0.003, null, 'the answer played to its end');
  Object.assign(seen, await probe(page, ({ after, sourcesBefore }) => {
    const p = window.voiceProbe;
    return {
      interrupts: p.sent.filter(f => f.type === 'live-interrupt').length,
      played: p.sources.slice(sourcesBefore).length,
      stopped: p.sources.slice(sourcesBefore).filter(e => e.stoppedAt != null).length,
      finishReason: p.turns.slice(after).find(t => t.pcm > 0)?.finishReason,
    };
  }, { after, sourcesBefore }));
  seen.heardMs = await heardMs(page, index, 'echo');
  seen.interrupted = await liveMessages(page).nth(index).getAttribute('data-interrupted');
  log(`echo: ${JSON.stringify(seen)}`);
}

/** Hands-free: the user speaks over the answer; `serverDone`: after the gateway sent all of it. */
async function bargeIn(page, name, { serverDone }) {
  const seen = (steps[name] = {});
  if ((await voiceStatus(page)) !== 'on') {
    await startVoice(page, { handsFree: true });
    await page.locator('[data-testid="voice"][data-status="on"]').waitFor();
  }
  const after = await probe(page, () => window.voiceProbe.turns.length);
  const index = await liveMessages(page).count();
  await probe(page, () => window.voiceProbe.speak(600));
  const timing = await probe(page, options => window.voiceProbe.speakOver(options), {
    after,
    serverDone,
    speakMs: 800,
    minRemainingMs: 250,
    timeoutMs: STEP_TIMEOUT_MS,
  });
  Object.assign(seen, await afterBargeIn(page, timing));
  seen.firstHeardMs = await heardMs(page, index, `${name}: first utterance`);
  // The answer spoken over is marked interrupted in the transcript.
  const answer = liveMessages(page).nth(index);
  await answer.locator('[data-testid="answer-interrupted"]').waitFor();
  seen.interrupted = await answer.getAttribute('data-interrupted');
  seen.note = await answer.getByTestId('answer-interrupted').textContent();
  if (!serverDone) {
    // The gateway ends that turn `interrupted`.
    await until(page, id => window.voiceProbe.turns.find(t => t.messageId === id)?.finishReason != null, timing.messageId, 'the spoken-over turn ends');
    Object.assign(seen, await afterBargeIn(page, timing));
  }
  // The utterance that barged in is heard whole, and answered.
  seen.bargeInHeardMs = await heardMs(page, index + 1, `${name}: the utterance that barged in`);
  Object.assign(seen, { lateBuffers: (await afterBargeIn(page, timing)).lateBuffers });
  await screenshot(page, `voice-${name}`);
  log(`${name}: ${JSON.stringify(seen)}`);
}

async function main() {
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
  const browser = await launchChromium(EXECUTABLE);
  result.browserVersion = browser.version();
  try {
    const runs = [
      [BASE_URL, [['firstFrame', firstFrame], ['echo', echo], ['bargeInDone', page => bargeIn(page, 'bargeInDone', { serverDone: true })]]],
      ...(PACED_URL ? [[PACED_URL, [['bargeInStreaming', page => bargeIn(page, 'bargeInStreaming', { serverDone: false })]]]] : []),
    ];
    for (const [url, scenarios] of runs) {
      const { context, page } = await openPage(browser, url);
      for (const [name, scenario] of scenarios) {
        try {
          await scenario(page);
        } catch (error) {
          fail(`${name}: ${error.stack ?? error}`);
          await screenshot(page, `${name}-failed`).catch(() => undefined);
        }
      }
      if (url === BASE_URL) await axe(page, 'voice').catch(error => fail(`axe: ${error.stack ?? error}`));
      await context.close();
    }
  } finally {
    await browser.close();
  }
}

await runAndReport(main, result, { fail, started });

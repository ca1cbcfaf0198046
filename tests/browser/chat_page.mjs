// Drives the gateway's chat page in Debian's headless Chromium (playwright-core), in one browser.
//
//   node chat_page.mjs '{"url": "http://127.0.0.1:8080", "screenshotDir": "/tmp/x", "wav": "/tmp/voice.wav"}'
//
// The gateway runs with --detach-on-disconnect (so a reload resumes) and without auth.
// For each transport (SSE, then WebSocket, chosen with the page's switch):
//   echo; a payment allowed once, denied (with the keyboard), denied-and-stopped, "always" (a
//   second payment runs without asking), "never" (a second one is refused without asking);
//   get_location with a mocked position; /stream stopped; a reload during /stream resumes it.
//   SSE also: an error and Retry; WebSocket also: change_bgm.
// Then live voice on the microphone Chromium fakes from `wav`: push-to-talk (pointer and Space),
// the answer's tone seen in the page's AnalyserNode, barge-in by speaking and by Interrupt, an
// approval in a live turn; hands-free. Then markdown, reasoning and images; axe-core; and a
// phone-sized viewport.
// A screenshot is taken of each state. Any console error, page error or /api/ response >= 400
// fails the run. Every wait is a condition with a timeout; there are no fixed sleeps.
//
// Prints progress on stderr and one JSON line on stdout: {ok, failures, runs, live, axe, phone, ...}.
// Exit code 0 only when ok.

import { mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { launchChromium, messages, status, screenshotter, textOf, waitForText as waitForMessageText, runAndReport, send as sendText } from './browser.mjs';

const config = JSON.parse(process.argv[2] ?? '{}');
const BASE_URL = String(config.url ?? 'http://127.0.0.1:8080').replace(/\/$/, '');
const SCREENSHOT_DIR = config.screenshotDir ?? path.resolve('screenshots');
const EXECUTABLE = config.executablePath ?? '/usr/bin/chromium';
const WAV = config.wav;
const STEP_TIMEOUT_MS = config.stepTimeoutMs ?? 10_000;
const TRANSPORTS = config.transports ?? ['sse', 'ws'];
const POSITION = config.position ?? { latitude: 48.8566, longitude: 2.3522, accuracy: 12 };
const AXE = createRequire(import.meta.url).resolve('axe-core/axe.min.js');
const AXE_SOURCE = readFileSync(AXE, 'utf8');

const started = Date.now();
const log = line => process.stderr.write(`[chat_page ${((Date.now() - started) / 1000).toFixed(1)}s] ${line}\n`);

const failures = [];
const consoleLines = [];
const result = { ok: false, failures, runs: {}, live: {}, rendering: {}, axe: {}, phone: {}, console: consoleLines, screenshots: [] };

function fail(message) {
  log(`FAIL: ${message}`);
  failures.push(message);
}

// --- what the page sends ---------------------------------------------------------------------

/** Chat requests (POST /api/chat bodies, `send` frames), resumes, and every frame of live sockets. */
const traffic = { posts: [], sends: [], resumeGets: [], resumeFrames: 0, stops: [], live: [] };
const chatRequests = kind => (kind === 'ws' ? traffic.sends.length : traffic.posts.length);

/** Audio frames sent so far, and those waiting for a number of them. */
let audioSent = 0;
const audioWaiters = new Set();

function countAudioFrame(bytes) {
  traffic.live.push({ binary: bytes });
  audioSent += 1;
  for (const waiter of audioWaiters) if (audioSent >= waiter.target) waiter.resolve();
}

/** Resolves once the page has sent `count` more binary (audio) frames. */
function audioFrames(count) {
  return new Promise((resolve, reject) => {
    const waiter = { target: audioSent + count };
    const timer = setTimeout(() => {
      audioWaiters.delete(waiter);
      reject(new Error(`fewer than ${count} audio frames sent in ${STEP_TIMEOUT_MS} ms`));
    }, STEP_TIMEOUT_MS);
    waiter.resolve = () => {
      clearTimeout(timer);
      audioWaiters.delete(waiter);
      resolve();
    };
    audioWaiters.add(waiter);
  });
}

function watch(page) {
  page.on('console', message => {
    consoleLines.push(`${message.type()}: ${message.text()}`);
    if (message.type() === 'error') fail(`console error: ${message.text()}`);
  });
  page.on('pageerror', error => fail(`page error: ${error.stack ?? error.message}`));
  page.on('crash', () => fail('the page crashed'));
  page.on('request', request => {
    const { pathname } = new URL(request.url());
    if (pathname === '/api/chat' && request.method() === 'POST') traffic.posts.push(JSON.parse(request.postData()));
    if (/^\/api\/chat\/[^/]+\/stop$/.test(pathname)) traffic.stops.push(pathname);
  });
  page.on('response', response => {
    const { pathname } = new URL(response.url());
    if (/^\/api\/chat\/[^/]+\/stream$/.test(pathname)) traffic.resumeGets.push(response.status());
    if (pathname.startsWith('/api/') && response.status() >= 400) {
      fail(`${response.request().method()} ${pathname} answered ${response.status()}`);
    }
  });
  page.on('websocket', socket => {
    socket.on('framesent', ({ payload }) => {
      if (typeof payload !== 'string') {
        countAudioFrame(payload.length);
        return;
      }
      const frame = JSON.parse(payload);
      if (frame.type === 'send') traffic.sends.push(frame);
      else if (frame.type === 'resume') traffic.resumeFrames += 1;
      else if (frame.type.startsWith('live-')) traffic.live.push({ type: frame.type });
    });
  });
}

// --- the page ----------------------------------------------------------------------------------

const screenshot = screenshotter(SCREENSHOT_DIR, result);

/** `waitForText` of browser.mjs, with this script's step timeout. */
const waitForText = (page, index, pattern, label, options = {}) =>
  waitForMessageText(page, index, pattern, label, { timeout: STEP_TIMEOUT_MS, ...options });

/** `send` of browser.mjs; the message sent must show as the user's. */
async function send(page, text) {
  const answer = await sendText(page, text);
  if ((await messages(page).nth(answer - 1).getAttribute('data-role')) !== 'user') throw new Error('no user message');
  return answer;
}

/** After a turn: ready, no error shown, `count` messages. */
async function settled(page, count, label) {
  await status(page, 'ready').waitFor();
  const actual = await messages(page).count();
  if (actual !== count) fail(`${label}: ${actual} messages on the page, expected ${count}`);
  if (await page.getByTestId('error').isVisible()) fail(`${label}: error shown: ${await page.getByTestId('error').textContent()}`);
}

const toolPart = (page, index, name) =>
  messages(page).nth(index).locator(`[data-testid="tool-part"][data-tool-name="${name}"]`);

async function newChat(page) {
  const before = new URL(page.url()).searchParams.get('chat');
  await page.getByTestId('new-chat').click();
  await page.waitForURL(url => url.searchParams.get('chat') !== before);
  await messages(page).first().waitFor({ state: 'detached' });
}

/** Presses Shift+Tab from the message box until `target` has the focus: it is reachable by keyboard. */
async function tabBackTo(page, target, label) {
  await page.getByTestId('input').focus();
  for (let i = 0; i < 40; i++) {
    await page.keyboard.press('Shift+Tab');
    if (await target.evaluate(element => element === document.activeElement)) return i + 1;
  }
  throw new Error(`${label}: not reachable with Shift+Tab from the message box`);
}

const PAYMENT = '/tool process_payment {"amount": 5, "recipient": "bob"}';

/** One transport's scenarios; each records what it saw in `run[name]`. */
async function runTransport(page, kind) {
  const run = {};
  result.runs[kind] = run;
  const label = kind === 'ws' ? 'WebSocket' : 'SSE';
  const t0 = Date.now();
  await page.getByTestId('transport').selectOption(kind);
  await page.getByTestId('chat-id').filter({ hasText: label }).waitFor();
  if (new URL(page.url()).searchParams.get('transport') !== kind) fail(`${kind}: the URL does not keep the transport`);
  await newChat(page);

  /** Runs `body` as one scenario: counts its chat requests and takes a screenshot after it. */
  const scenario = async (name, body) => {
    const before = chatRequests(kind);
    const seen = (run[name] = {});
    await body(seen);
    seen.requests = chatRequests(kind) - before;
    await screenshot(page, `${kind}-${name}`);
    log(`${label} ${name}: ${JSON.stringify(seen)}`);
  };

  await scenario('echo', async seen => {
    const index = await send(page, '/echo hello browser');
    seen.text = await waitForText(page, index, /^hello browser$/, 'echo');
    await settled(page, index + 1, 'echo');
  });

  await scenario('approve', async seen => {
    const index = await send(page, PAYMENT);
    const tool = toolPart(page, index, 'process_payment');
    await tool.getByTestId('approve-once').click();
    await tool.and(page.locator('[data-state="output-available"]')).waitFor();
    seen.output = JSON.parse(await tool.getByTestId('tool-output').textContent());
    seen.text = await waitForText(page, index, /process_payment -> /, 'approve');
    seen.decision = await tool.getByTestId('approval-decision').textContent();
    await settled(page, index + 1, 'approve');
  });

  await scenario('deny', async seen => {
    const index = await send(page, PAYMENT);
    const tool = toolPart(page, index, 'process_payment');
    // With the keyboard: Shift+Tab from the message box reaches the answer buttons.
    seen.tabs = await tabBackTo(page, tool.getByTestId('deny'), 'deny');
    await page.keyboard.press('Enter');
    await tool.and(page.locator('[data-state="output-denied"]')).waitFor();
    seen.text = await waitForText(page, index, /process_payment -> /, 'deny');
    seen.decision = await tool.getByTestId('approval-decision').textContent();
    await settled(page, index + 1, 'deny');
  });

  await scenario('deny_stop', async seen => {
    const index = await send(page, PAYMENT);
    const tool = toolPart(page, index, 'process_payment');
    await tool.getByTestId('deny-stop').click();
    await tool.and(page.locator('[data-state="output-denied"]')).waitFor();
    seen.interrupted = await tool.getByTestId('interrupted').textContent();
    await settled(page, index + 1, 'deny_stop');
    seen.text = await textOf(page, index);
    seen.lastPart = await messages(page).nth(index).locator('[data-testid]').last().getAttribute('data-testid');
  });

  await scenario('always', async seen => {
    await newChat(page);
    const first = await send(page, PAYMENT);
    const tool = toolPart(page, first, 'process_payment');
    await tool.getByTestId('approve-always').click();
    await waitForText(page, first, /process_payment -> /, 'always, first');
    await settled(page, first + 1, 'always, first');
    const before = chatRequests(kind);
    const second = await send(page, '/tool process_payment {"amount": 7, "recipient": "eve"}');
    seen.secondText = await waitForText(page, second, /process_payment -> /, 'always, second');
    await settled(page, second + 1, 'always, second');
    seen.secondRequests = chatRequests(kind) - before;
    const again = toolPart(page, second, 'process_payment');
    seen.secondState = await again.getAttribute('data-state');
    seen.secondOutput = JSON.parse(await again.getByTestId('tool-output').textContent());
    seen.secondAsked = await again.getByTestId('approval-decision').count();
  });

  await scenario('never', async seen => {
    await newChat(page);
    const first = await send(page, PAYMENT);
    const tool = toolPart(page, first, 'process_payment');
    await tool.getByTestId('never').click();
    await tool.and(page.locator('[data-state="output-denied"]')).waitFor();
    await waitForText(page, first, /process_payment -> /, 'never, first');
    await settled(page, first + 1, 'never, first');
    seen.firstDecision = await tool.getByTestId('approval-decision').textContent();
    const before = chatRequests(kind);
    const second = await send(page, PAYMENT);
    const again = toolPart(page, second, 'process_payment');
    await again.and(page.locator('[data-state="output-error"]')).waitFor();
    seen.secondText = await waitForText(page, second, /process_payment -> /, 'never, second');
    await settled(page, second + 1, 'never, second');
    seen.secondRequests = chatRequests(kind) - before;
    seen.secondError = await again.getByTestId('tool-error').textContent();
    seen.secondAsked = await again.getByTestId('approval-decision').count();
  });

  await scenario('location', async seen => {
    const index = await send(page, '/tool get_location {}');
    const tool = toolPart(page, index, 'get_location');
    await tool.getByTestId('approve-once').click();
    await tool.and(page.locator('[data-state="output-available"]')).waitFor();
    seen.output = JSON.parse(await tool.getByTestId('tool-output').textContent());
    seen.text = await waitForText(page, index, /get_location -> /, 'location');
    await settled(page, index + 1, 'location');
  });

  if (kind === 'ws') {
    await scenario('bgm', async seen => {
      const index = await send(page, '/tool change_bgm {"track": 2}');
      await toolPart(page, index, 'change_bgm').getByTestId('approve-once').click();
      seen.nowPlaying = await page.getByTestId('now-playing').filter({ hasText: 'track 2' }).textContent();
      seen.text = await waitForText(page, index, /change_bgm -> /, 'bgm');
      await settled(page, index + 1, 'bgm');
    });
  } else {
    await scenario('error_retry', async seen => {
      const index = await send(page, '/error the model is down');
      await status(page, 'error').waitFor();
      seen.error = await page.getByTestId('error').textContent();
      const retried = page.waitForRequest(r => new URL(r.url()).pathname === '/api/chat' && r.method() === 'POST');
      await page.getByTestId('retry').click();
      seen.retryTrigger = JSON.parse((await retried).postData()).trigger;
      await status(page, 'error').waitFor();
      seen.messagesAfterRetry = await messages(page).count();
      seen.expectedMessages = index + 1;
      await page.getByRole('button', { name: 'Dismiss' }).click();
      await status(page, 'ready').waitFor();
    });
  }

  await scenario('stop', async seen => {
    const stopsBefore = traffic.stops.length;
    const index = await send(page, '/stream 200 20');
    await waitForText(page, index, /tok5 /, 'stream started', { streaming: true });
    await page.getByTestId('stop').click();
    await status(page, 'ready').waitFor();
    const text = await textOf(page, index);
    seen.tokens = text.trim().split(/\s+/).length;
    seen.stopPosts = traffic.stops.length - stopsBefore;
    const next = await send(page, '/echo after stop');
    seen.nextText = await waitForText(page, next, /^after stop$/, 'after stop');
    await settled(page, next + 1, 'after stop');
    seen.unchangedAfterStop = (await textOf(page, index)) === text;
  });

  await scenario('resume', async seen => {
    const expected = Array.from({ length: 40 }, (_, i) => `tok${i}`).join(' ');
    const getsBefore = traffic.resumeGets.length;
    const framesBefore = traffic.resumeFrames;
    const index = await send(page, '/stream 40 60');
    await waitForText(page, index, /tok3 /, 'stream started', { streaming: true });
    await page.reload({ waitUntil: 'domcontentloaded' });
    seen.text = (await waitForText(page, index, /tok39/, 'resumed')).trim();
    seen.complete = seen.text === expected;
    await settled(page, index + 1, 'resume');
    seen.resumeGets = traffic.resumeGets.slice(getsBefore);
    seen.resumeFrames = traffic.resumeFrames - framesBefore;
    seen.transportAfterReload = await page.getByTestId('transport').inputValue();
  });

  run.seconds = (Date.now() - t0) / 1000;
}

// --- live voice ------------------------------------------------------------------------------

const speaker = page => page.getByTestId('speaker-level');

/** Bytes of audio sent between the last `live-activity-start` and the `live-activity-end` after it. */
function utteranceBytes() {
  const start = traffic.live.findLastIndex(f => f.type === 'live-activity-start');
  const end = traffic.live.findIndex((f, i) => i > start && f.type === 'live-activity-end');
  return traffic.live.slice(start, end).reduce((sum, f) => sum + (f.binary ?? 0), 0);
}

async function speakerReading(page) {
  return speaker(page).evaluate(m => ({ level: Number(m.dataset.level), peakHz: Number(m.dataset.peakHz), queuedMs: Number(m.dataset.queuedMs) }));
}

/** Waits until the page's output analyser hears something; returns the reading. */
async function waitForSound(page, label) {
  try {
    await page.waitForFunction(() => Number(document.querySelector('[data-testid="speaker-level"]').dataset.level) > 0.02, null, { polling: 'raf', timeout: STEP_TIMEOUT_MS });
  } catch {
    throw new Error(`${label}: the speaker level stayed at ${JSON.stringify(await speakerReading(page))}`);
  }
  return speakerReading(page);
}

/**
 * Barge-in timing, measured in the page: at the next `eventType` on `selector`, how much audio was
 * queued, and how long until the output analyser is silent with nothing queued. `armBargeIn`
 * first, then act, then `bargeInTiming`.
 */
async function armBargeIn(page, selector, eventType) {
  await page.evaluate(({ selector, eventType, timeoutMs }) => {
    window.bargeIn = new Promise((resolve, reject) => {
      const target = document.querySelector(selector);
      const listener = () => {
        const t0 = performance.now();
        const queuedMs = Number(document.querySelector('[data-testid="speaker-level"]').dataset.queuedMs);
        const check = () => {
          const m = document.querySelector('[data-testid="speaker-level"]').dataset;
          if (Number(m.level) < 0.005 && Number(m.queuedMs) === 0) resolve({ queuedMs, silentAfterMs: performance.now() - t0 });
          else if (performance.now() - t0 > 2000) reject(new Error(`still playing 2 s after the barge-in: ${JSON.stringify(m)}`));
          else requestAnimationFrame(check);
        };
        check();
      };
      target.addEventListener(eventType, listener, { once: true, capture: true });
      setTimeout(() => reject(new Error(`no ${eventType} on ${selector}`)), timeoutMs);
    });
  }, { selector, eventType, timeoutMs: STEP_TIMEOUT_MS });
}

const bargeInTiming = page => page.evaluate(() => window.bargeIn);

/** Waits until the output is silent and nothing is queued; returns how long that took. */
async function waitForSilence(page, timeout = STEP_TIMEOUT_MS) {
  const t0 = Date.now();
  await page.waitForFunction(() => {
    const m = document.querySelector('[data-testid="speaker-level"]').dataset;
    return Number(m.level) < 0.005 && Number(m.queuedMs) === 0;
  }, null, { polling: 'raf', timeout });
  return Date.now() - t0;
}

const liveMessages = page => page.locator('[data-testid="message"][data-live]');

/** Presses the talk button: with the pointer, or with Space once it has the focus. */
async function hold(page, { keyboard = false } = {}) {
  const talk = page.getByTestId('talk');
  if (keyboard) {
    await talk.focus();
    await page.keyboard.down(' ');
  } else {
    await talk.hover();
    await page.mouse.down();
  }
  await page.locator('[data-testid="talk"][aria-pressed="true"]').waitFor();
}

async function release(page, { keyboard = false } = {}) {
  if (keyboard) await page.keyboard.up(' ');
  else await page.mouse.up();
  await page.locator('[data-testid="talk"][aria-pressed="false"]').waitFor();
}

/** Starts watching for the next sound now (before what causes it); await it later. */
function nextSound(page, label) {
  const sound = waitForSound(page, label);
  sound.catch(() => undefined); // awaited by the caller; not unhandled if the caller failed first
  return sound;
}

/**
 * One push-to-talk utterance of about `frames` × 20 ms. Returns the index of its answer and the
 * promise of the answer's first sound.
 */
async function speak(page, frames, options = {}) {
  const index = await liveMessages(page).count();
  await hold(page, options);
  await audioFrames(frames);
  const sound = nextSound(page, `answer ${index} plays`);
  await release(page, options);
  await liveMessages(page).nth(index).waitFor();
  return { index, sound };
}

async function heard(page, liveIndex, label) {
  const message = liveMessages(page).nth(liveIndex);
  await message.locator('[data-testid="text-part"]').filter({ hasText: /heard \d+ ms of audio/ }).waitFor().catch(async error => {
    throw new Error(`${label}: no "heard N ms" in ${JSON.stringify(await message.textContent())} (${error.message})`);
  });
  const text = (await message.locator('[data-testid="text-part"]').allTextContents()).join('');
  return Number(/heard (\d+) ms/.exec(text)[1]);
}

async function runLive(page) {
  const live = result.live;
  const t0 = Date.now();
  await newChat(page);

  // Push-to-talk: the answer's tone plays through the page's audio graph, then stops by itself.
  await page.getByTestId('voice-start').click();
  await page.locator('[data-testid="voice"][data-status="on"]').waitFor();
  await page.locator('[data-testid="mic-level"]').waitFor();
  // The same output carries change_bgm's tune (about 1 s, from the WebSocket run just before):
  // let it end, so that what the analyser hears next is the answer's tone alone.
  await waitForSilence(page);
  {
    const { index, sound } = await speak(page, 50);
    live.sentMs = utteranceBytes() / 32; // PCM16 at 16 kHz: 32 bytes a millisecond
    live.playing = await sound;
    live.heardMs = await heard(page, index, 'push-to-talk');
    live.transcription = await liveMessages(page).nth(index).getByTestId('transcription').textContent();
    live.silenceAfterMs = await waitForSilence(page);
    await screenshot(page, 'live-push-to-talk');
  }

  // Push-to-talk with Space.
  {
    const { index, sound } = await speak(page, 25, { keyboard: true });
    live.keyboardSentMs = utteranceBytes() / 32;
    await sound;
    live.keyboardHeardMs = await heard(page, index, 'push-to-talk with Space');
    await waitForSilence(page);
  }

  // Barge-in by speaking (Space again) while an answer plays, then with the Interrupt button
  // while the answer to that utterance plays: each time the playback stops at once.
  {
    const keyboard = { keyboard: true };
    const bargingIn = (await liveMessages(page).count()) + 1;
    await hold(page, keyboard);
    await audioFrames(15);
    await armBargeIn(page, '[data-testid="talk"]', 'keydown');
    const third = nextSound(page, 'the third answer plays');
    await release(page, keyboard);
    await third;
    await page.keyboard.down(' ');
    live.bargeInBySpeech = await bargeInTiming(page);
    await audioFrames(10);
    await page.getByTestId('interrupt').hover(); // the focus stays on the talk button
    await armBargeIn(page, '[data-testid="interrupt"]', 'click');
    const fourth = nextSound(page, 'the fourth answer plays');
    await release(page, keyboard);
    await fourth;
    await page.mouse.down();
    await page.mouse.up();
    live.bargeInByButton = await bargeInTiming(page);
    const transcription = liveMessages(page).nth(bargingIn).getByTestId('transcription');
    live.bargeInTranscription = await transcription.filter({ hasText: /\d+ ms of audio/ }).textContent();
    await screenshot(page, 'live-barge-in');
  }
  live.liveFrames = [...new Set(traffic.live.filter(f => f.type).map(f => f.type))];

  // An approval in a live turn: the same buttons, answered with a live-approval frame.
  {
    const before = await liveMessages(page).count();
    await page.getByTestId('input').fill('/tool process_payment {"amount": 3, "recipient": "carol"}');
    await page.getByTestId('input').press('Enter');
    const message = liveMessages(page).nth(before);
    const tool = message.locator('[data-testid="tool-part"][data-tool-name="process_payment"]');
    await tool.getByTestId('approve-once').click();
    await tool.and(page.locator('[data-state="output-available"]')).waitFor();
    await message.locator('[data-testid="text-part"]').filter({ hasText: 'process_payment -> ' }).waitFor();
    live.approvalOutput = JSON.parse(await tool.getByTestId('tool-output').textContent());
    live.approvalFrames = traffic.live.filter(f => f.type === 'live-approval').length;
    await screenshot(page, 'live-approval');
    await axe(page, 'voice');
  }
  await page.getByTestId('voice-stop').click();
  await page.locator('[data-testid="voice"][data-status="off"]').waitFor();

  // Hands-free: the fake microphone's tone bursts are utterances; the gateway hears them.
  {
    const framesBefore = traffic.live.length;
    const before = await liveMessages(page).count();
    await page.getByTestId('hands-free').check();
    await page.getByTestId('voice-start').click();
    await page.locator('[data-testid="voice"][data-status="on"]').waitFor();
    await page.getByTestId('talk').waitFor({ state: 'detached' });
    live.handsFreeHeardMs = await heard(page, before, 'hands-free');
    live.handsFreePlaying = await waitForSound(page, 'hands-free answer plays');
    const frames = traffic.live.slice(framesBefore);
    live.handsFreeActivityFrames = frames.filter(f => f.type === 'live-activity-start').length;
    live.handsFreeAudioFrames = frames.filter(f => f.binary).length;
    await screenshot(page, 'live-hands-free');
    await page.getByTestId('voice-stop').click();
    await page.locator('[data-testid="voice"][data-status="off"]').waitFor();
  }
  live.voiceErrors = await page.getByTestId('voice-error').count();
  live.seconds = (Date.now() - t0) / 1000;
  log(`live: ${JSON.stringify(live)}`);
}

// --- accessibility and the phone -------------------------------------------------------------

async function axe(page, name) {
  // The page's CSP refuses injected script tags: axe-core is evaluated in the page instead.
  await page.evaluate(AXE_SOURCE);
  const violations = await page.evaluate(async () => {
    const { violations } = await window.axe.run(document, { resultTypes: ['violations'] });
    return violations.map(v => ({ id: v.id, impact: v.impact, help: v.help, targets: v.nodes.map(n => n.target.join(' ')).slice(0, 5) }));
  });
  result.axe[name] = violations;
  log(`axe ${name}: ${violations.map(v => `${v.id} (${v.impact})`).join(', ') || 'no violations'}`);
}

/** Markdown (and that it is safe), folded reasoning, an inline image. */
async function runRendering(page) {
  const r = result.rendering;
  await newChat(page);
  const md = await send(page, '/echo **bold** `code` <b>raw</b> [site](https://example.com/) [bad](javascript:alert(1))');
  r.text = await waitForText(page, md, /site bad/, 'markdown');
  const part = messages(page).nth(md).getByTestId('text-part');
  r.strong = await part.locator('strong').allTextContents();
  r.code = await part.locator('code').allTextContents();
  r.rawElements = await part.locator('b').count();
  r.links = await part.locator('a').evaluateAll(links => links.map(a => a.getAttribute('href')));
  const think = await send(page, '/think the sky is blue');
  await waitForText(page, think, /done/, 'think');
  const reasoning = messages(page).nth(think).getByTestId('reasoning-part');
  r.reasoningOpen = await reasoning.evaluate(details => details.open);
  await reasoning.locator('summary').click();
  r.reasoningText = await reasoning.textContent();
  const image = await send(page, '/image');
  await status(page, 'ready').waitFor();
  const img = messages(page).nth(image).getByTestId('image');
  await img.waitFor();
  await page.waitForFunction(element => element.complete && element.naturalWidth > 0, await img.elementHandle());
  r.imageWidth = await img.evaluate(element => element.naturalWidth);
  r.imageAlt = await img.getAttribute('alt');
  await screenshot(page, 'rendering');
  log(`rendering: ${JSON.stringify(r)}`);
}

/** A chat with text, a tool and a pending approval, the state with the most on screen. */
async function busyChat(page) {
  await newChat(page);
  const echo = await send(page, '/echo hello **world**');
  await waitForText(page, echo, /hello world/, 'echo');
  const index = await send(page, PAYMENT);
  await toolPart(page, index, 'process_payment').getByTestId('approval-buttons').waitFor();
  return index;
}

async function runPhone(browser) {
  const context = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
  context.setDefaultTimeout(STEP_TIMEOUT_MS);
  const page = await context.newPage();
  watch(page);
  await page.goto(`${BASE_URL}/`, { waitUntil: 'domcontentloaded' });
  const index = await busyChat(page);
  const phone = result.phone;
  phone.overflowPx = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  phone.buttonsVisible = await toolPart(page, index, 'process_payment').getByTestId('deny').isVisible();
  await screenshot(page, 'phone');
  await axe(page, 'phone');
  await toolPart(page, index, 'process_payment').getByTestId('approve-once').tap();
  phone.text = await waitForText(page, index, /process_payment -> /, 'phone approve');
  await context.close();
}

async function main() {
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
  const browser = await launchChromium(EXECUTABLE, { fakeAudioCapture: WAV });
  result.browserVersion = browser.version();
  try {
    const context = await browser.newContext({
      viewport: { width: 1100, height: 900 },
      geolocation: POSITION,
      permissions: ['geolocation', 'microphone'],
    });
    context.setDefaultTimeout(STEP_TIMEOUT_MS);
    const page = await context.newPage();
    watch(page);
    await page.goto(`${BASE_URL}/`, { waitUntil: 'domcontentloaded' });
    await status(page, 'ready').waitFor();
    if (await page.getByTestId('auth-form').count()) fail('the token form shows on a gateway without auth');
    const steps = [
      ...TRANSPORTS.map(kind => [kind, () => runTransport(page, kind)]),
      ['live', () => runLive(page)],
      ['rendering', () => runRendering(page)],
      ['axe', async () => {
        await busyChat(page);
        await axe(page, 'desktop');
      }],
    ];
    for (const [name, step] of steps) {
      try {
        await step();
      } catch (error) {
        fail(`${name}: ${error.stack ?? error}`);
        await screenshot(page, `${name}-failed`).catch(() => undefined);
      }
    }
    await context.close();
    await runPhone(browser).catch(error => fail(`phone: ${error.stack ?? error}`));
  } finally {
    await browser.close();
  }
}

await runAndReport(main, result, { fail, started });

// Drives the gateway's bundled chat page in Debian's headless Chromium (playwright-core).
//
//   node chat_page.mjs '{"url": "http://127.0.0.1:8080", "screenshotDir": "/tmp/x"}'
//
// For each transport (SSE, then WebSocket through the page's transport switch) it runs:
//   1. `/echo hello browser`                      -> the answer is "hello browser"       (1 request)
//   2. `/tool process_payment {...}` + Allow once -> output shown, "process_payment -> " (2 requests)
//   3. `/tool change_bgm {"track": 2}` + Allow    -> the page plays track 2, "change_bgm -> " (<= 3)
//   4. `/stream 200 20`, Stop                      -> status ready; `/echo after stop` answers
// and takes a screenshot. Requests are POST /api/chat (SSE) or `send` frames (WebSocket).
// The gateway runs without auth: the page must start without showing its token form.
// Any console error, page error or /api/ response >= 400 fails the run. Every wait is a DOM
// condition with a timeout; there are no fixed sleeps.
//
// Prints progress on stderr and one JSON line on stdout: {ok, failures, runs, console, ...}.
// Exit code 0 only when ok.

import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { launchChromium } from './browser.mjs';

const config = JSON.parse(process.argv[2] ?? '{}');
const BASE_URL = String(config.url ?? 'http://127.0.0.1:8080').replace(/\/$/, '');
const SCREENSHOT_DIR = config.screenshotDir ?? path.resolve('screenshots');
const EXECUTABLE = config.executablePath ?? '/usr/bin/chromium';
const STEP_TIMEOUT_MS = config.stepTimeoutMs ?? 10_000;
const TRANSPORTS = config.transports ?? ['sse', 'ws'];

const started = Date.now();
const log = (/** @type {string} */ line) =>
  process.stderr.write(`[chat_page ${((Date.now() - started) / 1000).toFixed(1)}s] ${line}\n`);

/** Problems that fail the run but let it go on (console errors, wrong counts). */
const failures = [];
const consoleLines = [];
const result = { ok: false, failures, runs: {}, console: consoleLines, screenshots: [] };

function fail(/** @type {string} */ message) {
  log(`FAIL: ${message}`);
  failures.push(message);
}

/** Requests the page made for chat turns: SSE POSTs and WebSocket `send` frames. */
const sent = { sse: 0, ws: 0 };

function attachWatchers(/** @type {import('playwright-core').Page} */ page) {
  page.on('console', message => {
    const line = `${message.type()}: ${message.text()}`;
    consoleLines.push(line);
    if (message.type() === 'error') fail(`console error: ${message.text()}`);
  });
  page.on('pageerror', error => fail(`page error: ${error.stack ?? error.message}`));
  page.on('crash', () => fail('the page crashed'));
  page.on('request', request => {
    const url = new URL(request.url());
    if (url.pathname === '/api/chat' && request.method() === 'POST') sent.sse += 1;
  });
  page.on('response', response => {
    const url = new URL(response.url());
    if (url.pathname.startsWith('/api/') && response.status() >= 400) {
      fail(`${response.request().method()} ${url.pathname} answered ${response.status()}`);
    }
  });
  page.on('websocket', socket => {
    socket.on('framesent', frame => {
      if (typeof frame.payload !== 'string') return;
      try {
        if (JSON.parse(frame.payload).type === 'send') sent.ws += 1;
      } catch {
        // not JSON: not a chat request
      }
    });
  });
}

/**
 * One chat turn: types `text`, waits for `done(assistant)`, returns the number of chat
 * requests the turn made (counted up to the start of the next turn, see `settle`).
 */
class Turns {
  constructor(/** @type {import('playwright-core').Page} */ page, /** @type {'sse' | 'ws'} */ kind) {
    this.page = page;
    this.kind = kind;
    /** @type {{name: string, before: number, check: (n: number) => string | null} | null} */
    this.open = null;
    this.counts = {};
  }

  /** Closes the previous turn's count: every request made since it began belongs to it. */
  settle() {
    if (this.open == null) return;
    const { name, before, check } = this.open;
    const count = sent[this.kind] - before;
    this.counts[name] = count;
    const problem = check(count);
    if (problem) fail(`${this.kind} ${name}: ${problem} (made ${count})`);
    this.open = null;
  }

  /**
   * Sends `text` and returns the locator of this turn's assistant message.
   * @param {string} name
   * @param {string} text
   * @param {(n: number) => string | null} check
   */
  async send(name, text, check) {
    const { page } = this;
    await expectStatus(page, 'ready');
    this.settle();
    const messages = page.locator('[data-testid="message"]');
    const before = await messages.count();
    this.open = { name, before: sent[this.kind], check };
    const input = page.getByTestId('input');
    await input.fill(text);
    await input.press('Enter');
    // One user message and one assistant message; continuations keep that message.
    await messages.nth(before + 1).waitFor({ timeout: STEP_TIMEOUT_MS });
    const user = messages.nth(before);
    await assertAttribute(user, 'data-role', 'user');
    const assistant = messages.nth(before + 1);
    await assertAttribute(assistant, 'data-role', 'assistant');
    assistant.messageIndex = before + 1;
    return { assistant, messages, expectedCount: before + 2 };
  }
}

async function assertAttribute(locator, name, value) {
  const actual = await locator.getAttribute(name, { timeout: STEP_TIMEOUT_MS });
  if (actual !== value) throw new Error(`expected ${name}=${value}, got ${actual}`);
}

/** Waits until the page's status shows `status`. */
async function expectStatus(page, status, timeout = STEP_TIMEOUT_MS) {
  await page.locator(`[data-testid="status"][data-status="${status}"]`).waitFor({ timeout });
}

/**
 * Waits until the joined text parts of the message at `index` match `pattern`. The page
 * re-renders a message as a new element on each update, so this looks it up each time.
 */
async function waitForText(page, assistant, pattern, description, timeout = STEP_TIMEOUT_MS) {
  const index = assistant.messageIndex;
  try {
    await page.waitForFunction(
      ({ index, source, flags }) => {
        const element = document.querySelectorAll('[data-testid="message"]')[index];
        if (element == null) return false;
        const text = [...element.querySelectorAll('[data-testid="text-part"]')]
          .map(node => node.textContent)
          .join('');
        return new RegExp(source, flags).test(text);
      },
      { index, source: pattern.source, flags: pattern.flags },
      { timeout },
    );
  } catch (error) {
    const text = await assistantText(assistant);
    throw new Error(`${description}: the assistant text is ${JSON.stringify(text)}, expected ${pattern} (${error.message})`);
  }
}

async function assistantText(assistant) {
  return (await assistant.locator('[data-testid="text-part"]').allTextContents()).join('');
}

/** After a turn: status ready, no error banner, no extra message. */
async function expectTurnDone(page, messages, expectedCount, label) {
  await expectStatus(page, 'ready');
  const count = await messages.count();
  if (count !== expectedCount) fail(`${label}: ${count} messages on the page, expected ${expectedCount}`);
  if (await page.getByTestId('error').isVisible()) {
    fail(`${label}: error banner shows ${JSON.stringify(await page.getByTestId('error').textContent())}`);
  }
}

const exactly = (/** @type {number} */ n) => (/** @type {number} */ count) =>
  count === n ? null : `expected exactly ${n} chat request(s)`;
const atMost = (/** @type {number} */ n) => (/** @type {number} */ count) =>
  count >= 1 && count <= n ? null : `expected 1..${n} chat requests`;

/** One transport's scenario on the page. */
async function runTransport(page, kind) {
  const label = kind === 'ws' ? 'WebSocket' : 'SSE';
  const turns = new Turns(page, kind);
  const run = { transport: kind, counts: turns.counts };
  result.runs[kind] = run;
  const t0 = Date.now();
  log(`${label}: start`);

  // The transport switch: pick the transport, then start a clean chat.
  const select = page.getByTestId('transport');
  if ((await select.inputValue()) !== kind) await select.selectOption(kind);
  await page.getByTestId('chat-id').filter({ hasText: label }).waitFor({ timeout: STEP_TIMEOUT_MS });
  await expectStatus(page, 'ready');
  await page.getByTestId('new-chat').click();
  await page.locator('[data-testid="message"]').first().waitFor({ state: 'detached', timeout: STEP_TIMEOUT_MS });
  await page.getByTestId('chat-id').filter({ hasText: label }).waitFor({ timeout: STEP_TIMEOUT_MS });

  // 1. echo
  {
    const { assistant, messages, expectedCount } = await turns.send('echo', '/echo hello browser', exactly(1));
    await waitForText(page, assistant, /^\s*hello browser\s*$/, 'echo');
    await expectTurnDone(page, messages, expectedCount, `${kind} echo`);
    log(`${label}: echo ok`);
  }

  // 2. a server tool with approval
  {
    const { assistant, messages, expectedCount } = await turns.send(
      'process_payment',
      '/tool process_payment {"amount": 5, "recipient": "bob"}',
      exactly(2),
    );
    const tool = assistant.locator('[data-testid="tool-part"][data-tool-name="process_payment"]');
    await tool.getByTestId('approve-once').click({ timeout: STEP_TIMEOUT_MS });
    await tool.and(page.locator('[data-state="output-available"]')).waitFor({ timeout: STEP_TIMEOUT_MS });
    await tool.getByTestId('tool-output').waitFor({ timeout: STEP_TIMEOUT_MS });
    await waitForText(page, assistant, /process_payment -> /, 'process_payment');
    await expectTurnDone(page, messages, expectedCount, `${kind} process_payment`);
    run.paymentOutput = await tool.getByTestId('tool-output').textContent();
    run.paymentText = await assistantText(assistant);
    log(`${label}: process_payment ok: ${JSON.stringify(run.paymentText)}`);
  }

  // 3. a browser tool with approval
  {
    const { assistant, messages, expectedCount } = await turns.send(
      'change_bgm',
      '/tool change_bgm {"track": 2}',
      atMost(3),
    );
    const tool = assistant.locator('[data-testid="tool-part"][data-tool-name="change_bgm"]');
    await tool.getByTestId('approve-once').click({ timeout: STEP_TIMEOUT_MS });
    await page.getByTestId('now-playing').filter({ hasText: 'now playing track 2' }).waitFor({ timeout: STEP_TIMEOUT_MS });
    await tool.and(page.locator('[data-state="output-available"]')).waitFor({ timeout: STEP_TIMEOUT_MS });
    await waitForText(page, assistant, /change_bgm -> /, 'change_bgm');
    await expectTurnDone(page, messages, expectedCount, `${kind} change_bgm`);
    run.bgmOutput = await tool.getByTestId('tool-output').textContent();
    run.bgmText = await assistantText(assistant);
    log(`${label}: change_bgm ok: ${JSON.stringify(run.bgmText)}`);
  }

  // 4. Stop a long stream, then the next message answers.
  {
    const { assistant } = await turns.send('stream', '/stream 200 20', exactly(1));
    await waitForText(page, assistant, /tok5 /, 'stream started');
    await page.getByTestId('stop').click({ timeout: STEP_TIMEOUT_MS });
    await expectStatus(page, 'ready');
    const text = await assistantText(assistant);
    run.stoppedAfterTokens = text.trim().split(/\s+/).length;
    if (text.includes('tok199')) fail(`${kind} stream: Stop did not stop (the stream ran to the end)`);
    log(`${label}: stopped after ${run.stoppedAfterTokens} tokens`);

    const next = await turns.send('after_stop', '/echo after stop', exactly(1));
    await waitForText(page, next.assistant, /^\s*after stop\s*$/, 'echo after stop');
    await expectTurnDone(page, next.messages, next.expectedCount, `${kind} after stop`);
    // The stopped stream stays stopped: no tokens arrive after the Stop.
    const later = await assistantText(assistant);
    if (later !== text) fail(`${kind} stream: text changed after Stop (${text.length} -> ${later.length} chars)`);
    log(`${label}: echo after stop ok`);
  }
  turns.settle();

  const screenshot = path.join(SCREENSHOT_DIR, `chat-${kind}.png`);
  await page.screenshot({ path: screenshot, fullPage: false });
  result.screenshots.push(screenshot);
  run.seconds = (Date.now() - t0) / 1000;
  log(`${label}: done in ${run.seconds.toFixed(1)} s; requests per turn ${JSON.stringify(turns.counts)}; screenshot ${screenshot}`);
}

async function main() {
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
  const browser = await launchChromium(EXECUTABLE);
  result.browserVersion = browser.version();
  try {
    // A fresh context: empty localStorage and sessionStorage (the transport defaults to SSE).
    const context = await browser.newContext({ viewport: { width: 1100, height: 900 } });
    context.setDefaultTimeout(STEP_TIMEOUT_MS);
    const page = await context.newPage();
    attachWatchers(page);
    await page.goto(`${BASE_URL}/`, { waitUntil: 'domcontentloaded' });
    await page.waitForFunction(() => window.__ready === true && window.__chat != null, null, {
      timeout: STEP_TIMEOUT_MS,
    });
    // Auth `none`: GET /api/me answers without a token, so the page never asks for one.
    if (await page.getByTestId('auth-form').isVisible()) fail('the token form shows on a gateway without auth');
    result.user = await page.getByTestId('user').textContent();
    for (const kind of TRANSPORTS) {
      try {
        await runTransport(page, kind);
      } catch (error) {
        fail(`${kind}: ${error.stack ?? error}`);
        const screenshot = path.join(SCREENSHOT_DIR, `chat-${kind}-failed.png`);
        await page.screenshot({ path: screenshot }).catch(() => undefined);
        result.screenshots.push(screenshot);
        break;
      }
    }
    await context.close();
  } finally {
    await browser.close();
  }
}

try {
  await main();
} catch (error) {
  fail(`driver: ${error.stack ?? error}`);
}
result.seconds = (Date.now() - started) / 1000;
result.ok = failures.length === 0;
process.stdout.write(`${JSON.stringify(result)}\n`);
process.exitCode = result.ok ? 0 : 1;

// Drives the chat page in Debian's headless Chromium against a gateway with auth on
// (`--auth jwt`): the token form, then chats with the token over SSE and over the WebSocket.
//
//   node auth_page.mjs '{"url": "http://127.0.0.1:8080", "token": "<JWT of alice>", "user": "alice"}'
//
// With "pageUrl", the page is loaded from there instead (a copy of the built page on another
// origin whose <meta name="adk-gateway-url"> names `url`): every step is the same, and every
// /api/ request and socket must go to the gateway's origin, across CORS.
//
// Steps:
//   1. the page loads: GET /api/me answers 401, the token form shows, the chat waits
//   2. a wrong token: the form stays, with an error, and nothing is stored; axe-core checks the form
//   3. the right token: the form goes away, the header shows the user, the token is stored
//   4. SSE: `/echo hello world` answers (POST /api/chat carries `Authorization: Bearer`);
//      `/stream 200 20` + Stop: POST .../stop is JSON with the token and answers 200
//   5. WebSocket (the transport switch): `/echo hello world` answers; the socket URL carries
//      `?access_token=` and no frame carries the token
//   6. a reload signs in from sessionStorage without asking
//   7. a chat request answered 401 (an expired token, played by a routed response): the token is
//      forgotten and the form shows again; signing in again clears the error and the chat answers
// Any console error, page error or /api/ response >= 400 other than the expected 401s fails the
// run. Every wait is a DOM condition with a timeout; there are no fixed sleeps.
//
// Prints progress on stderr and one JSON line on stdout: {ok, failures, checks, console, ...}.
// Exit code 0 only when ok.

import { mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { launchChromium, screenshotter, runAndReport } from './browser.mjs';

const config = JSON.parse(process.argv[2] ?? '{}');
const BASE_URL = String(config.url ?? 'http://127.0.0.1:8080').replace(/\/$/, '');
const PAGE_URL = String(config.pageUrl ?? BASE_URL).replace(/\/$/, '');
const PAGE_ORIGIN = new URL(PAGE_URL).origin;
const TOKEN = String(config.token ?? '');
const USER = String(config.user ?? 'alice');
const SCREENSHOT_DIR = config.screenshotDir ?? path.resolve('screenshots');
const EXECUTABLE = config.executablePath ?? '/usr/bin/chromium';
const STEP_TIMEOUT_MS = config.stepTimeoutMs ?? 10_000;
const TOKEN_KEY = 'adk-gateway-token';
const AXE = createRequire(import.meta.url).resolve('axe-core/axe.min.js');
const AXE_SOURCE = readFileSync(AXE, 'utf8');
const WRONG_TOKEN = 'not-a-valid-token';

const started = Date.now();
const log = (/** @type {string} */ line) =>
  process.stderr.write(`[auth_page ${((Date.now() - started) / 1000).toFixed(1)}s] ${line}\n`);

/** Problems that fail the run but let it go on. */
const failures = [];
const consoleLines = [];
/** What the steps saw, for the Python side to assert on. */
const checks = {};
const result = { ok: false, failures, checks, console: consoleLines, screenshots: [] };

function fail(/** @type {string} */ message) {
  log(`FAIL: ${message}`);
  failures.push(message);
}

/** Responses the scenario expects to be 401: `GET /api/me` always, `POST /api/chat` in step 7. */
const expected401 = new Set(['GET /api/me']);
/** Chat requests and WebSocket frames seen, with what identified them. */
const seen = { chatPosts: [], stops: [], sockets: [], frames: [], unauthorized: [], apiOrigins: new Set() };

function attachWatchers(/** @type {import('playwright-core').Page} */ page) {
  page.on('console', message => {
    const line = `${message.type()}: ${message.text()}`;
    consoleLines.push(line);
    if (message.type() !== 'error') return;
    // Chromium reports every 4xx load on the console; the expected 401s are checked below.
    if (/Failed to load resource: the server responded with a status of 401/.test(message.text())) return;
    fail(`console error: ${message.text()}`);
  });
  page.on('pageerror', error => fail(`page error: ${error.stack ?? error.message}`));
  page.on('crash', () => fail('the page crashed'));
  page.on('request', request => {
    const url = new URL(request.url());
    const headers = request.headers();
    if (url.pathname.startsWith('/api/')) seen.apiOrigins.add(url.origin);
    if (url.pathname === '/api/chat' && request.method() === 'POST') {
      seen.chatPosts.push({ authorization: headers.authorization ?? null });
    }
    if (/^\/api\/chat\/[^/]+\/stop$/.test(url.pathname)) {
      seen.stops.push({
        authorization: headers.authorization ?? null,
        contentType: headers['content-type'] ?? null,
        body: request.postData(),
        status: null,
      });
    }
  });
  page.on('response', response => {
    const url = new URL(response.url());
    if (!url.pathname.startsWith('/api/')) return;
    const what = `${response.request().method()} ${url.pathname}`;
    if (/^\/api\/chat\/[^/]+\/stop$/.test(url.pathname) && seen.stops.length > 0) {
      seen.stops[seen.stops.length - 1].status = response.status();
    }
    if (response.status() === 401 && expected401.has(what)) {
      seen.unauthorized.push(what);
      return;
    }
    if (response.status() >= 400) fail(`${what} answered ${response.status()}`);
  });
  page.on('websocket', socket => {
    seen.sockets.push(socket.url());
    seen.apiOrigins.add(new URL(socket.url()).origin.replace(/^ws/, 'http'));
    socket.on('framesent', frame => {
      if (typeof frame.payload === 'string') seen.frames.push(frame.payload);
    });
  });
}

/** Waits until the page's status shows `status`. */
async function expectStatus(page, status, timeout = STEP_TIMEOUT_MS) {
  await page.locator(`[data-testid="status"][data-status="${status}"]`).waitFor({ timeout });
}

async function storedToken(page) {
  return page.evaluate(key => sessionStorage.getItem(key), TOKEN_KEY);
}

/** Waits for the page to be signed in and its chat ready. */
async function expectSignedIn(page, label) {
  await page.getByTestId('auth-form').waitFor({ state: 'detached', timeout: STEP_TIMEOUT_MS });
  await expectStatus(page, 'ready');
  await page.getByTestId('user').filter({ hasText: USER }).waitFor({ timeout: STEP_TIMEOUT_MS });
  if ((await storedToken(page)) !== TOKEN) fail(`${label}: sessionStorage does not hold the token`);
}

/** Enters `token` in the form and submits it. */
async function enterToken(page, token) {
  await page.getByTestId('auth-token').fill(token);
  await page.getByTestId('auth-submit').click();
}

/**
 * Sends `text` and waits until the new assistant message's text matches `pattern` and the chat
 * is ready again; returns that text.
 */
async function chat(page, text, pattern, label) {
  await expectStatus(page, 'ready');
  const messages = page.locator('[data-testid="message"]');
  const before = await messages.count();
  const input = page.getByTestId('input');
  await input.fill(text);
  await input.press('Enter');
  try {
    await page.waitForFunction(
      ({ index, source }) => {
        const element = document.querySelectorAll('[data-testid="message"]')[index];
        if (element == null || element.dataset.role !== 'assistant') return false;
        const text = [...element.querySelectorAll('[data-testid="text-part"]')]
          .map(node => node.textContent)
          .join('');
        return new RegExp(source).test(text);
      },
      { index: before + 1, source: pattern.source },
      { timeout: STEP_TIMEOUT_MS },
    );
  } catch (error) {
    const banner = await page.getByTestId('error').textContent();
    throw new Error(`${label}: no answer matching ${pattern} (error banner: ${JSON.stringify(banner)}): ${error.message}`);
  }
  await expectStatus(page, 'ready');
  if (await page.getByTestId('error').isVisible()) {
    fail(`${label}: error banner shows ${JSON.stringify(await page.getByTestId('error').textContent())}`);
  }
  return (await messages.nth(before + 1).locator('[data-testid="text-part"]').allTextContents()).join('');
}

/** Picks a transport with the switch and starts a clean chat. */
async function useTransport(page, kind) {
  const label = kind === 'ws' ? 'WebSocket' : 'SSE';
  const select = page.getByTestId('transport');
  if ((await select.inputValue()) !== kind) await select.selectOption(kind);
  await page.getByTestId('chat-id').filter({ hasText: label }).waitFor({ timeout: STEP_TIMEOUT_MS });
  await expectStatus(page, 'ready');
  await page.getByTestId('new-chat').click();
  await page.locator('[data-testid="message"]').first().waitFor({ state: 'detached', timeout: STEP_TIMEOUT_MS });
}

const screenshot = screenshotter(SCREENSHOT_DIR, result);

async function scenario(page) {
  const bearer = `Bearer ${TOKEN}`;

  // 1. The page asks for a token; the chat waits.
  await page.goto(`${PAGE_URL}/`, { waitUntil: 'domcontentloaded' });
  await page.getByTestId('auth-form').waitFor({ state: 'visible', timeout: STEP_TIMEOUT_MS });
  checks.formShown = true;
  checks.readyBeforeSignIn = (await page.getByTestId('input').count()) > 0;
  checks.firstErrorShown = (await page.getByTestId('auth-error').count()) > 0;
  await screenshot(page, 'auth-form');
  log('token form shown');

  // 2. A wrong token: the form stays and says why.
  await enterToken(page, WRONG_TOKEN);
  await page.getByTestId('auth-error').filter({ hasText: /\S/ }).waitFor({ state: 'visible', timeout: STEP_TIMEOUT_MS });
  checks.wrongTokenError = await page.getByTestId('auth-error').textContent();
  checks.formAfterWrongToken = await page.getByTestId('auth-form').isVisible();
  checks.storedAfterWrongToken = await storedToken(page);
  await screenshot(page, 'auth-wrong-token');
  // The form with its error, through axe-core: [{id, impact}] of each violation.
  // The page's CSP refuses injected script tags: axe-core is evaluated in the page instead.
  await page.evaluate(AXE_SOURCE);
  checks.axe = await page.evaluate(async () =>
    (await window.axe.run(document, { resultTypes: ['violations'] })).violations.map(v => ({ id: v.id, impact: v.impact })),
  );
  log(`wrong token: ${JSON.stringify(checks.wrongTokenError)}`);

  // 3. The right token: signed in.
  await enterToken(page, TOKEN);
  await expectSignedIn(page, 'sign-in');
  checks.user = await page.getByTestId('user').textContent();
  log(`signed in as ${checks.user}`);

  // 4. SSE: a chat, then Stop.
  await useTransport(page, 'sse');
  const postsBefore = seen.chatPosts.length;
  checks.sseText = await chat(page, '/echo hello world', /^\s*hello world\s*$/, 'SSE echo');
  checks.ssePostAuthorization = seen.chatPosts.slice(postsBefore).map(post => post.authorization === bearer);
  log(`SSE echo: ${JSON.stringify(checks.sseText)}`);
  {
    const messages = page.locator('[data-testid="message"]');
    const index = (await messages.count()) + 1;
    await page.getByTestId('input').fill('/stream 200 20');
    await page.getByTestId('input').press('Enter');
    await page.waitForFunction(
      index => /tok5 /.test(document.querySelectorAll('[data-testid="message"]')[index]?.textContent ?? ''),
      index,
      { timeout: STEP_TIMEOUT_MS },
    );
    const stopResponse = page.waitForResponse(
      response => /\/api\/chat\/[^/]+\/stop$/.test(new URL(response.url()).pathname),
      { timeout: STEP_TIMEOUT_MS },
    );
    await page.getByTestId('stop').click();
    await stopResponse;
    await expectStatus(page, 'ready');
    const stop = seen.stops.at(-1);
    checks.stop = stop && { ...stop, authorization: stop.authorization === bearer };
    log(`SSE stop: ${JSON.stringify(checks.stop)}`);
  }

  // 5. WebSocket: a chat; the token rides on the socket URL only.
  const socketsBefore = seen.sockets.length;
  await useTransport(page, 'ws');
  checks.wsText = await chat(page, '/echo hello world', /^\s*hello world\s*$/, 'WebSocket echo');
  checks.wsUrlsWithToken = seen.sockets
    .slice(socketsBefore)
    .map(url => new URL(url).searchParams.get('access_token') === TOKEN);
  checks.tokenInFrames = seen.frames.some(frame => frame.includes(TOKEN));
  await screenshot(page, 'auth-chat-ws');
  log(`WebSocket echo: ${JSON.stringify(checks.wsText)}; sockets ${JSON.stringify(checks.wsUrlsWithToken)}`);

  // 6. A reload signs in from sessionStorage.
  const unauthorizedBefore = seen.unauthorized.length;
  await page.reload({ waitUntil: 'domcontentloaded' });
  await expectSignedIn(page, 'reload');
  checks.reloadAsked = seen.unauthorized.length !== unauthorizedBefore;
  log(`reload: asked again: ${checks.reloadAsked}`);

  // 7. A chat request answered 401: the form shows again; signing in again recovers.
  await useTransport(page, 'sse');
  expected401.add('POST /api/chat');
  await page.route('**/api/chat', route =>
    route.fulfill({
      status: 401,
      contentType: 'application/json',
      // As the gateway answers: readable by the page's origin when that is another one.
      headers: {
        'WWW-Authenticate': 'Bearer realm="adk-gateway", error="invalid_token"',
        'Access-Control-Allow-Origin': PAGE_ORIGIN,
        Vary: 'Origin',
      },
      body: JSON.stringify({ error: { code: 'unauthorized', message: 'token expired' } }),
    }),
  );
  await page.getByTestId('input').fill('/echo expired');
  await page.getByTestId('input').press('Enter');
  await page.getByTestId('auth-form').waitFor({ state: 'visible', timeout: STEP_TIMEOUT_MS });
  await page.getByTestId('auth-error').filter({ hasText: /\S/ }).waitFor({ state: 'visible', timeout: STEP_TIMEOUT_MS });
  checks.expiredError = await page.getByTestId('auth-error').textContent();
  checks.storedAfterExpiry = await storedToken(page);
  await page.unroute('**/api/chat');
  expected401.delete('POST /api/chat');
  await screenshot(page, 'auth-expired');
  log(`expired: ${JSON.stringify(checks.expiredError)}`);
  await enterToken(page, TOKEN);
  await expectSignedIn(page, 'sign-in again');
  await expectStatus(page, 'ready');
  checks.errorAfterSignInAgain = await page.getByTestId('error').isVisible();
  checks.afterExpiryText = await chat(page, '/echo hello again', /^\s*hello again\s*$/, 'SSE echo after sign-in');
  log(`after sign-in again: ${JSON.stringify(checks.afterExpiryText)}`);
}

async function main() {
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
  const browser = await launchChromium(EXECUTABLE);
  result.browserVersion = browser.version();
  try {
    // A fresh context: no stored token, the transport defaults to SSE.
    const context = await browser.newContext({ viewport: { width: 1100, height: 900 } });
    context.setDefaultTimeout(STEP_TIMEOUT_MS);
    const page = await context.newPage();
    attachWatchers(page);
    try {
      await scenario(page);
    } catch (error) {
      fail(`scenario: ${error.stack ?? error}`);
      const file = path.join(SCREENSHOT_DIR, 'auth-failed.png');
      await page.screenshot({ path: file }).catch(() => undefined);
      result.screenshots.push(file);
    }
    await context.close();
  } finally {
    await browser.close();
  }
}

await runAndReport(main, result, {
  fail,
  started,
  finish: () => {
    result.unauthorized = seen.unauthorized;
    result.pageOrigin = PAGE_ORIGIN;
    result.apiOrigins = [...seen.apiOrigins];
  },
});

// Drives the chat page (web/) in Debian's headless Chromium against a gateway serving the agents
// folder tests/adk_apps (seven ADK apps on an offline model), with `--client-state cart
// --detach-on-disconnect`, and the local OAuth2 server of tests/oauth_server.py for the sign-in.
//
//   node adk_features_page.mjs '{"url": "http://127.0.0.1:8080", "oauthUrl": "http://127.0.0.1:8095"}'
//
// The app picker ("App") chooses each app; each is a new chat. Over SSE:
//   grounding (sources as links and document names, Google's search suggestions in a sandboxed
//   iframe), artifacts (the image shown, the text file a link that downloads), a transfer (agent
//   labels), shared state (the state panel shows the cart), a long-running tool (answered from the
//   page: 2 requests), a tool sign-in (a popup through the OAuth server and the gateway's
//   callback, then the chat goes on: 2 requests) and a sign-in cancelled.
// Over the WebSocket (the transport switch): the long-running tool and the sign-in again.
// Then axe-core on the states with the most on screen, and a phone-sized viewport.
// A screenshot is taken of each feature. Any console error, page error or /api/ response >= 400
// fails the run. Every wait is a condition with a timeout, but for one short pause after a turn
// that checks no further request follows.
//
// Prints progress on stderr and one JSON line on stdout: {ok, failures, picker, sse, ws, axe, phone, ...}.
// Exit code 0 only when ok.

import { mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { launchChromium, messages, status, chatIdOf, screenshotter, textOf, waitForText as waitForMessageText, runAndReport, send } from './browser.mjs';

const config = JSON.parse(process.argv[2] ?? '{}');
const BASE_URL = String(config.url ?? 'http://127.0.0.1:8080').replace(/\/$/, '');
const OAUTH_URL = String(config.oauthUrl ?? 'http://127.0.0.1:8095').replace(/\/$/, '');
const SCREENSHOT_DIR = config.screenshotDir ?? path.resolve('screenshots');
const EXECUTABLE = config.executablePath ?? '/usr/bin/chromium';
const STEP_TIMEOUT_MS = config.stepTimeoutMs ?? 15_000;
const QUIET_MS = 600; // after a turn: long enough for a resend loop to show itself
const AXE = createRequire(import.meta.url).resolve('axe-core/axe.min.js');
const AXE_SOURCE = readFileSync(AXE, 'utf8');

const started = Date.now();
const log = line => process.stderr.write(`[adk_features_page ${((Date.now() - started) / 1000).toFixed(1)}s] ${line}\n`);

const failures = [];
const consoleLines = [];
const result = { ok: false, failures, picker: {}, sse: {}, ws: {}, axe: {}, phone: {}, console: consoleLines, screenshots: [] };

function fail(message) {
  log(`FAIL: ${message}`);
  failures.push(message);
}

// --- what the page sends ---------------------------------------------------------------------

/** Chat requests: POST /api/chat bodies (SSE) and `send` frames (WebSocket). */
const traffic = { posts: [], sends: [] };
const chatRequests = kind => (kind === 'ws' ? traffic.sends : traffic.posts);

function watch(page, name = 'page') {
  page.on('console', message => {
    consoleLines.push(`${name} ${message.type()}: ${message.text()}`);
    if (message.type() === 'error') fail(`${name} console error: ${message.text()}`);
  });
  page.on('pageerror', error => fail(`${name} page error: ${error.stack ?? error.message}`));
  page.on('crash', () => fail(`${name} crashed`));
  page.on('request', request => {
    const { pathname } = new URL(request.url());
    if (pathname === '/api/chat' && request.method() === 'POST') traffic.posts.push(JSON.parse(request.postData()));
  });
  page.on('response', response => {
    const { pathname } = new URL(response.url());
    if (pathname.startsWith('/api/') && response.status() >= 400) {
      fail(`${name}: ${response.request().method()} ${pathname} answered ${response.status()}`);
    }
  });
  page.on('websocket', socket => {
    socket.on('framesent', ({ payload }) => {
      if (typeof payload !== 'string') return;
      const frame = JSON.parse(payload);
      if (frame.type === 'send') traffic.sends.push(frame);
    });
  });
}

// --- the page ----------------------------------------------------------------------------------

const screenshot = screenshotter(SCREENSHOT_DIR, result);

/** `waitForText` of browser.mjs, with this script's step timeout. */
const waitForText = (page, index, pattern, label, options = {}) =>
  waitForMessageText(page, index, pattern, label, { timeout: STEP_TIMEOUT_MS, ...options });

/** After a turn: ready, and still ready (no request follows) a moment later; no error shown. */
async function settled(page, label) {
  await status(page, 'ready').waitFor();
  await page.waitForTimeout(QUIET_MS);
  if (!(await status(page, 'ready').isVisible())) fail(`${label}: the chat did not stay ready (a resend?)`);
  if (await page.getByTestId('error').isVisible()) fail(`${label}: error shown: ${await page.getByTestId('error').textContent()}`);
}

const toolPart = (page, index, name) =>
  messages(page).nth(index).locator(`[data-testid="tool-part"][data-tool-name="${name}"]`);

/** Picks `app` in the picker (by its label, "App"); a new chat starts either way. */
async function pickApp(page, app) {
  const picker = page.getByLabel('App', { exact: true });
  const before = chatIdOf(page);
  if ((await picker.inputValue()) === app) await page.getByTestId('new-chat').click();
  else await picker.selectOption(app);
  await page.waitForURL(url => url.searchParams.get('chat') !== before && url.searchParams.get('app') === app);
  await messages(page).first().waitFor({ state: 'detached' });
  await status(page, 'ready').waitFor();
}

/**
 * Runs one turn's scenario in a new chat of `app`: records the chat requests it made (and the
 * `app` each named) and takes a screenshot after it.
 */
async function feature(page, kind, name, app, body) {
  const seen = (result[kind][name] = {});
  const t0 = Date.now();
  try {
    await pickApp(page, app);
    const requests = chatRequests(kind);
    const before = requests.length;
    await body(seen);
    const made = requests.slice(before);
    seen.requests = made.length;
    seen.apps = made.map(r => (kind === 'ws' ? r.body?.app : r.app));
    seen.seconds = (Date.now() - t0) / 1000;
    await screenshot(page, `${kind}-${name}`);
    log(`${kind} ${name}: ${JSON.stringify(seen)}`);
  } catch (error) {
    fail(`${kind} ${name}: ${error.stack ?? error}`);
    await screenshot(page, `${kind}-${name}-failed`).catch(() => undefined);
  }
}

// --- the features ------------------------------------------------------------------------------

async function grounding(page, seen) {
  const index = await send(page, 'What is the capital of France?');
  seen.text = await waitForText(page, index, /^Paris is the capital of France\.$/, 'grounding');
  await settled(page, 'grounding');
  const message = messages(page).nth(index);
  seen.links = await message.locator('[data-testid="source-url"] a').evaluateAll(links =>
    links.map(a => ({ text: a.textContent, href: a.getAttribute('href'), target: a.target })),
  );
  seen.linkHosts = await message.locator('[data-testid="source-url"] .muted').allTextContents();
  seen.documents = await message.locator('[data-testid="source-document"] .document-name').allTextContents();
  const frame = message.getByTestId('search-suggestions');
  seen.suggestionsVisible = await frame.isVisible();
  seen.suggestionsHeight = (await frame.boundingBox())?.height ?? 0;
  seen.sandbox = await frame.getAttribute('sandbox');
  seen.srcdocHasBase = (await frame.getAttribute('srcdoc')).includes('<base target="_blank">');
  seen.chips = await message.frameLocator('[data-testid="search-suggestions"]').locator('a').allTextContents();
  // Sandboxed without scripts: a script in the frame does not run.
  seen.scriptsRun = await frame.evaluate(iframe => {
    try {
      return iframe.contentWindow.eval('1') === 1;
    } catch {
      return false;
    }
  });
}

async function artifacts(page, seen) {
  const index = await send(page, 'Write a report and draw a chart');
  seen.text = await waitForText(page, index, /Saved chart\.png \(version 0\)\.$/, 'artifacts');
  await settled(page, 'artifacts');
  const message = messages(page).nth(index);
  const img = message.getByTestId('image');
  await page.waitForFunction(element => element.complete && element.naturalWidth > 0, await img.elementHandle(), { timeout: STEP_TIMEOUT_MS });
  seen.imageWidth = await img.evaluate(element => element.naturalWidth);
  seen.imageAlt = await img.getAttribute('alt');
  const link = message.getByTestId('file-link');
  seen.linkText = await link.textContent();
  seen.fileType = await message.getByTestId('file-type').textContent();
  seen.download = await link.getAttribute('download');
  const href = await link.evaluate(a => a.href);
  seen.fileHost = new URL(href).host;
  const response = await page.request.get(href);
  seen.fileStatus = response.status();
  seen.fileBody = await response.text();
}

async function transfer(page, seen) {
  const index = await send(page, "What's the weather in Paris?");
  seen.text = await waitForText(page, index, /It is sunny and 22°C in Paris\.$/, 'transfer');
  await settled(page, 'transfer');
  seen.agents = await messages(page).nth(index).getByTestId('agent-label').evaluateAll(labels => labels.map(l => l.dataset.agent));
  seen.labels = await messages(page).nth(index).getByTestId('agent-label').allTextContents();
}

async function sharedState(page, seen) {
  seen.panelBefore = await page.getByTestId('state-panel').count();
  const index = await send(page, 'add 2 apples');
  seen.text = await waitForText(page, index, /Added 2 apples\. Cart: 2 apples\.$/, 'state');
  await settled(page, 'state');
  const panel = page.getByTestId('state-panel');
  seen.panelVisible = await panel.isVisible();
  seen.entries = await panel.getByTestId('state-entry').evaluateAll(entries =>
    entries.map(e => ({ key: e.dataset.key, value: JSON.parse(e.querySelector('dd').textContent) })),
  );
}

async function longRunning(page, seen, kind) {
  const before = chatRequests(kind).length;
  const index = await send(page, 'Please reimburse $250 for a team dinner');
  const tool = toolPart(page, index, 'ask_for_approval');
  const form = tool.getByTestId('tool-answer-form');
  await form.waitFor();
  await status(page, 'ready').waitFor();
  seen.state = await tool.getByTestId('tool-state').textContent();
  seen.input = JSON.parse(await tool.getByTestId('tool-input').textContent());
  seen.status = JSON.parse(await tool.getByTestId('tool-status').textContent());
  seen.prefilled = JSON.parse(await tool.getByTestId('tool-answer-input').inputValue());
  seen.requestsWhileWaiting = chatRequests(kind).length - before;
  await screenshot(page, `${kind}-long-running-waiting`);
  if (kind === 'sse') await axe(page, 'long-running');
  await tool.getByTestId('tool-answer-submit').click();
  seen.text = await waitForText(page, index, /Done: \$250\.00 reimbursed for a team dinner\.$/, 'long-running');
  await settled(page, 'long-running');
  seen.finalState = await tool.getAttribute('data-state');
  seen.output = JSON.parse(await tool.getByTestId('tool-output').textContent());
  const sent = chatRequests(kind).at(-1);
  // The page sends the last message only (the server keeps the history).
  const sentPart = (sent.message ?? sent.messages.at(-1)).parts.find(p => p.type === 'tool-ask_for_approval');
  seen.sentOutput = sentPart?.output;
  seen.sentState = sentPart?.state;
  seen.formGone = (await tool.getByTestId('tool-answer-form').count()) === 0;
}

async function signIn(page, seen, kind) {
  const index = await send(page, 'What is on my calendar today?');
  const tool = toolPart(page, index, 'adk_request_credential');
  const button = tool.getByTestId('sign-in');
  await button.waitFor();
  await status(page, 'ready').waitFor();
  seen.heading = (await tool.locator('header .tool-name').textContent()).trim();
  seen.calendarWhileWaiting = await toolPart(page, index, 'list_calendar_events').getByTestId('tool-state').textContent();
  await screenshot(page, `${kind}-sign-in-waiting`);
  if (kind === 'sse') await axe(page, 'sign-in');

  // The popup: the provider's /authorize, its redirect to the gateway's callback, which closes it.
  // Its navigations are seen on the context, so that the first one is not missed (the page
  // itself does not navigate meanwhile).
  const context = page.context();
  const navigations = [];
  const onResponse = response => {
    if (!response.request().isNavigationRequest()) return;
    const url = new URL(response.url());
    navigations.push({ url: `${url.origin}${url.pathname}`, status: response.status() });
  };
  context.on('response', onResponse);
  const popupOpened = page.waitForEvent('popup');
  await button.click();
  const popup = await popupOpened;
  watch(popup, 'popup');
  await popup.waitForEvent('close', { timeout: STEP_TIMEOUT_MS });
  context.off('response', onResponse);
  seen.popupNavigations = navigations;
  seen.visitedOAuth = navigations.some(n => n.url === `${OAUTH_URL}/authorize` && n.status === 302);
  seen.callbackStatus = navigations.find(n => n.url === `${BASE_URL}/api/oauth/callback`)?.status;

  seen.text = await waitForText(page, index, /^You have 2 events today: Standup at 09:00, Design review at 14:00\.$/, 'sign-in');
  await settled(page, 'sign-in');
  seen.finalState = await tool.getAttribute('data-state');
  seen.signedInShown = await tool.getByTestId('sign-in-done').isVisible();
  seen.calendarState = await toolPart(page, index, 'list_calendar_events').getAttribute('data-state');
}

/** Cancel instead of signing in: the call ends in an error, and the agent says it could not sign in. */
async function signInCancelled(page, seen) {
  const index = await send(page, 'What is on my calendar today?');
  const tool = toolPart(page, index, 'adk_request_credential');
  await tool.getByTestId('sign-in-cancel').click();
  seen.text = await waitForText(page, index, /could not sign in/, 'sign-in cancelled');
  await settled(page, 'sign-in cancelled');
  seen.finalState = await tool.getAttribute('data-state');
  seen.error = await tool.getByTestId('tool-error').textContent();
  const sent = chatRequests('sse').at(-1);
  const sentPart = (sent.message ?? sent.messages.at(-1)).parts.find(p => p.type === 'tool-adk_request_credential');
  seen.sent = { state: sentPart?.state, errorText: sentPart?.errorText };
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

/** A phone: the long-running form and the state panel fit the width. */
async function runPhone(browser) {
  const context = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
  context.setDefaultTimeout(STEP_TIMEOUT_MS);
  const page = await context.newPage();
  watch(page, 'phone');
  await page.goto(`${BASE_URL}/?app=state_app`, { waitUntil: 'domcontentloaded' });
  await status(page, 'ready').waitFor();
  const phone = result.phone;
  const cart = await send(page, 'add 2 apples');
  await waitForText(page, cart, /Cart: 2 apples\.$/, 'phone state');
  await pickApp(page, 'long_running_app');
  const index = await send(page, 'Please reimburse $250 for a team dinner');
  const tool = toolPart(page, index, 'ask_for_approval');
  await tool.getByTestId('tool-answer-form').waitFor();
  phone.overflowPx = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  phone.answerVisible = await tool.getByTestId('tool-answer-submit').isVisible();
  phone.pickerVisible = await page.getByLabel('App', { exact: true }).isVisible();
  await screenshot(page, 'phone');
  await axe(page, 'phone');
  await tool.getByTestId('tool-answer-submit').tap();
  phone.text = await waitForText(page, index, /Done: \$250\.00 reimbursed for a team dinner\.$/, 'phone long-running');
  await context.close();
}

async function main() {
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
  const browser = await launchChromium(EXECUTABLE);
  result.browserVersion = browser.version();
  try {
    const context = await browser.newContext({ viewport: { width: 1100, height: 900 } });
    context.setDefaultTimeout(STEP_TIMEOUT_MS);
    const page = await context.newPage();
    watch(page);
    await page.goto(`${BASE_URL}/`, { waitUntil: 'domcontentloaded' });
    await status(page, 'ready').waitFor();

    const picker = page.getByLabel('App', { exact: true });
    await picker.waitFor();
    result.picker.options = await picker.locator('option').allTextContents();
    result.picker.initial = await picker.inputValue();

    await feature(page, 'sse', 'grounding', 'grounding_app', async seen => {
      await grounding(page, seen);
      await axe(page, 'grounding');
    });
    await feature(page, 'sse', 'artifacts', 'artifacts_app', seen => artifacts(page, seen));
    await feature(page, 'sse', 'transfer', 'transfer_app', seen => transfer(page, seen));
    await feature(page, 'sse', 'state', 'state_app', async seen => {
      await sharedState(page, seen);
      await axe(page, 'state');
    });
    await feature(page, 'sse', 'long_running', 'long_running_app', seen => longRunning(page, seen, 'sse'));
    await feature(page, 'sse', 'sign_in', 'sign_in_app', seen => signIn(page, seen, 'sse'));
    await feature(page, 'sse', 'sign_in_cancelled', 'sign_in_app', seen => signInCancelled(page, seen));

    try {
      await page.getByTestId('transport').selectOption('ws');
      await page.getByTestId('chat-id').filter({ hasText: 'WebSocket' }).waitFor();
      result.ws.appKept = new URL(page.url()).searchParams.get('app');
    } catch (error) {
      fail(`switch to the WebSocket: ${error.stack ?? error}`);
    }
    await feature(page, 'ws', 'long_running', 'long_running_app', seen => longRunning(page, seen, 'ws'));
    await feature(page, 'ws', 'sign_in', 'sign_in_app', seen => signIn(page, seen, 'ws'));
    await context.close();
    await runPhone(browser).catch(error => fail(`phone: ${error.stack ?? error}`));
  } finally {
    await browser.close();
  }
}

await runAndReport(main, result, { fail, started });

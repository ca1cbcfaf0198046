// Drives the chat page's sidebar and server-kept chats in Debian's headless Chromium
// (playwright-core), with two browser contexts ("devices") of the same user, against a gateway
// running the demo agent with --detach-on-disconnect and without auth (the user: 'anonymous').
//
//   node chats_page.mjs '{"url": "http://127.0.0.1:8080", "screenshotDir": "/tmp/x"}'
//
// Steps (each records what it saw under its name):
//   first        context A, SSE: a new chat, `/echo`; the sidebar lists it, its first text the title
//   approval     a payment, approved: every POST of the chat is a last-message body
//   rename       with the keyboard: Rename, a new title, Enter (PATCH); the focus comes back
//   second       context B opens the chat's URL over the WebSocket: the same messages as A shows
//   continueB    B sends a message: its `send` frame carries one message; B gets the answer
//   reloadA      A reloads: it shows B's continuation too
//   pending      A asks for a payment and leaves it pending; B reloads (SSE): the approval is
//                answerable there; approving it continues the chat with exactly one POST; A
//                reloads and shows it answered
//   phone        a phone-sized context: the sidebar hides behind "Chats"; open, Escape, open a chat
//   delete       A deletes the chat (asked first): gone from the list, A is on a new chat; B opens
//                the deleted chat's URL: a notice, a new empty chat (the 404 is handled)
// axe-core runs on A with the sidebar, on the phone with the sidebar open.
// Any console error, page error or /api/ response >= 400 fails the run, but for the 404 of the
// deleted chat's load in the last step. Every wait is a condition with a timeout, but for one
// short pause that checks that no second request follows an approval.
//
// Prints progress on stderr and one JSON line on stdout: {ok, failures, steps, axe, ...}.
// Exit code 0 only when ok.

import { mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { launchChromium, messages, status, chatIdOf, screenshotter, textOf, waitForText as waitForMessageText, runAndReport, send } from './browser.mjs';

const config = JSON.parse(process.argv[2] ?? '{}');
const BASE_URL = String(config.url ?? 'http://127.0.0.1:8080').replace(/\/$/, '');
const SCREENSHOT_DIR = config.screenshotDir ?? path.resolve('screenshots');
const EXECUTABLE = config.executablePath ?? '/usr/bin/chromium';
const STEP_TIMEOUT_MS = config.stepTimeoutMs ?? 10_000;
const QUIET_MS = 600; // after a continuation: long enough for a second request to show itself
// axe-core goes in with `evaluate` (not a <script>, which the page's CSP, `script-src 'self'`, refuses).
const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const PAYMENT = '/tool process_payment {"amount": 5, "recipient": "bob"}';
const PENDING_PAYMENT = '/tool process_payment {"amount": 9, "recipient": "carol"}';
const TITLE = 'Payments with Bob';

const started = Date.now();
const log = line => process.stderr.write(`[chats_page ${((Date.now() - started) / 1000).toFixed(1)}s] ${line}\n`);

const failures = [];
const consoleLines = [];
const steps = {};
const result = { ok: false, failures, steps, axe: {}, console: consoleLines, screenshots: [] };

function fail(message) {
  log(`FAIL: ${message}`);
  failures.push(message);
}

// --- what the pages send -----------------------------------------------------------------------

/** POST /api/chat bodies and WebSocket `send` frames (with the page that sent them), /api/chats calls. */
const traffic = { posts: [], sends: [], chatsApi: [] };
/** `GET /api/chats/{id}` paths whose 404 the delete step expects. */
const expected404 = new Set();

function watch(page, name) {
  page.on('console', message => {
    consoleLines.push(`${name} ${message.type()}: ${message.text()}`);
    if (message.type() !== 'error') return;
    // Chromium reports every 4xx load on the console; the deleted chat's 404 is expected.
    if (expected404.size && /status of 404/.test(message.text())) return;
    fail(`${name} console error: ${message.text()}`);
  });
  page.on('pageerror', error => fail(`${name} page error: ${error.stack ?? error.message}`));
  page.on('crash', () => fail(`${name} crashed`));
  page.on('request', request => {
    const { pathname } = new URL(request.url());
    if (pathname === '/api/chat' && request.method() === 'POST') {
      traffic.posts.push({ page: name, body: JSON.parse(request.postData()) });
    }
  });
  page.on('response', response => {
    const { pathname } = new URL(response.url());
    const method = response.request().method();
    if (pathname.startsWith('/api/chats')) traffic.chatsApi.push({ page: name, method, path: pathname, status: response.status() });
    if (!pathname.startsWith('/api/') || response.status() < 400) return;
    if (response.status() === 404 && method === 'GET' && expected404.has(pathname)) return;
    fail(`${name}: ${method} ${pathname} answered ${response.status()}`);
  });
  page.on('websocket', socket => {
    socket.on('framesent', ({ payload }) => {
      if (typeof payload !== 'string') return;
      const frame = JSON.parse(payload);
      if (frame.type === 'send') traffic.sends.push({ page: name, frame });
    });
  });
}

// --- the page ----------------------------------------------------------------------------------

const item = (page, chatId) => page.locator(`[data-testid="chat-item"][data-chat-id="${chatId}"]`);
const toolPart = (page, index, name) =>
  messages(page).nth(index).locator(`[data-testid="tool-part"][data-tool-name="${name}"]`);

const screenshot = screenshotter(SCREENSHOT_DIR, result);

/** `waitForText` of browser.mjs, with this script's step timeout. */
const waitForText = (page, index, pattern, label, options = {}) =>
  waitForMessageText(page, index, pattern, label, { timeout: STEP_TIMEOUT_MS, ...options });

/** After a turn: ready, `count` messages, no error shown. */
async function settled(page, count, label) {
  await status(page, 'ready').waitFor();
  await page.waitForFunction(count => document.querySelectorAll('[data-testid="message"]').length === count, count, { timeout: STEP_TIMEOUT_MS }).catch(async () => {
    fail(`${label}: ${await messages(page).count()} messages on the page, expected ${count}`);
  });
  if (await page.getByTestId('error').isVisible()) fail(`${label}: error shown: ${await page.getByTestId('error').textContent()}`);
}

/** Opens `url` and waits for the chat to show `count` messages, ready. */
async function openChat(page, url, count, label) {
  await page.goto(url, { waitUntil: 'domcontentloaded' });
  await status(page, 'ready').waitFor();
  await settled(page, count, label);
}

/** What each message shows: its role, its text parts, its tool parts' states, all its visible text. */
function snapshot(page) {
  return page.evaluate(() =>
    [...document.querySelectorAll('[data-testid="message"]')].map(message => ({
      role: message.dataset.role,
      text: [...message.querySelectorAll('[data-testid="text-part"]')].map(part => part.textContent).join('|'),
      tools: [...message.querySelectorAll('[data-testid="tool-part"]')].map(part => `${part.dataset.toolName}:${part.dataset.state}`),
      visible: message.innerText,
    })),
  );
}

/** The sidebar's items: id, title, whether it is the open chat. */
function listed(page) {
  return page.locator('[data-testid="chat-item"]').evaluateAll(items =>
    items.map(item => ({
      id: item.dataset.chatId,
      title: item.querySelector('[data-testid="chat-title"]')?.textContent ?? null,
      current: item.querySelector('[data-testid="chat-link"]')?.getAttribute('aria-current') === 'page',
    })),
  );
}

/** Waits until the sidebar lists `chatId` with `title`. */
async function waitListed(page, chatId, title, label) {
  try {
    await item(page, chatId).locator('[data-testid="chat-title"]').filter({ hasText: title }).waitFor();
  } catch (error) {
    throw new Error(`${label}: the sidebar lists ${JSON.stringify(await listed(page))}, not ${chatId} "${title}" (${error.message})`);
  }
}

const isFocused = locator => locator.evaluate(element => element === document.activeElement);

/** The chat requests a page made for `chatId`: POST bodies (SSE) or `send` frames (WebSocket). */
const postsOf = (chatId, page) => traffic.posts.filter(p => p.body.id === chatId && (!page || p.page === page)).map(p => p.body);
const framesOf = (chatId, page) => traffic.sends.filter(s => s.frame.id === chatId && (!page || s.page === page)).map(s => s.frame);

/** What a body says of its message: role, text, tool states; and whether it has a `messages` array. */
function describeBody(body) {
  const message = body.message;
  return {
    hasMessage: message != null && typeof message === 'object',
    hasMessages: 'messages' in body,
    role: message?.role,
    text: message?.parts?.filter(p => p.type === 'text').map(p => p.text).join('') ?? null,
    tools: message?.parts?.filter(p => p.type?.startsWith('tool-')).map(p => `${p.type.slice(5)}:${p.state}`) ?? [],
    trigger: body.trigger,
  };
}

async function axe(page, name) {
  if (!(await page.evaluate(() => 'axe' in window))) await page.evaluate(AXE_SOURCE);
  const violations = await page.evaluate(async () => {
    const { violations } = await window.axe.run(document, { resultTypes: ['violations'] });
    return violations.map(v => ({ id: v.id, impact: v.impact, help: v.help, targets: v.nodes.map(n => n.target.join(' ')).slice(0, 5) }));
  });
  result.axe[name] = violations;
  log(`axe ${name}: ${violations.map(v => `${v.id} (${v.impact})`).join(', ') || 'no violations'}`);
}

async function newContext(browser, options = {}) {
  const context = await browser.newContext({ viewport: { width: 1100, height: 900 }, ...options });
  context.setDefaultTimeout(STEP_TIMEOUT_MS);
  return context;
}

// --- the steps ---------------------------------------------------------------------------------

/** Runs a step: records what it saw under `steps[name]`, takes a screenshot of `page` after it. */
async function step(name, page, body) {
  const seen = (steps[name] = {});
  const t0 = Date.now();
  try {
    await body(seen);
    seen.seconds = (Date.now() - t0) / 1000;
    log(`${name}: ${JSON.stringify(seen)}`);
    await screenshot(page(), name);
    return true;
  } catch (error) {
    fail(`${name}: ${error.stack ?? error}`);
    await screenshot(page(), `${name}-failed`).catch(() => undefined);
    return false;
  }
}

async function main() {
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
  const browser = await launchChromium(EXECUTABLE);
  result.browserVersion = browser.version();
  let chatId;
  let a;
  let b;
  const chatUrl = transport => `${BASE_URL}/?transport=${transport}&chat=${encodeURIComponent(chatId)}`;
  try {
    const contextA = await newContext(browser);
    a = await contextA.newPage();
    watch(a, 'A');
    await a.goto(`${BASE_URL}/`, { waitUntil: 'domcontentloaded' });
    await status(a, 'ready').waitFor();

    const ok = await step('first', () => a, async seen => {
      await a.getByTestId('sidebar').waitFor();
      chatId = chatIdOf(a);
      seen.chatId = chatId;
      seen.listedBefore = (await listed(a)).some(chat => chat.id === chatId);
      const index = await send(a, '/echo hello from A');
      seen.text = await waitForText(a, index, /^hello from A$/, 'first');
      await settled(a, 2, 'first');
      // The list refreshes after the turn: the new chat is there, its first text its title.
      await waitListed(a, chatId, '/echo hello from A', 'first');
      seen.listed = await listed(a);
      seen.landmark = await a.getByRole('navigation', { name: 'Your chats' }).getByRole('listitem').count();
    });
    if (!ok) return;

    await step('approval', () => a, async seen => {
      const index = await send(a, PAYMENT);
      const tool = toolPart(a, index, 'process_payment');
      await tool.getByTestId('approve-once').click();
      await tool.and(a.locator('[data-state="output-available"]')).waitFor();
      seen.text = await waitForText(a, index, /process_payment -> /, 'approval');
      await settled(a, 4, 'approval');
      seen.bodies = postsOf(chatId, 'A').map(describeBody);
      seen.ids = [...new Set(postsOf(chatId, 'A').map(body => body.id))];
    });

    await step('rename', () => a, async seen => {
      const chat = item(a, chatId);
      const rename = chat.getByTestId('rename');
      seen.renameName = await rename.getAttribute('aria-label');
      await rename.focus();
      await a.keyboard.press('Enter');
      const input = chat.getByTestId('rename-input');
      await input.waitFor();
      seen.inputFocused = await isFocused(input);
      seen.inputLabel = await a.locator(`label[for="${await input.getAttribute('id')}"]`).textContent();
      const patched = a.waitForResponse(r => r.request().method() === 'PATCH' && new URL(r.url()).pathname === `/api/chats/${chatId}`);
      await a.keyboard.press('ControlOrMeta+A');
      await a.keyboard.type(TITLE);
      await a.keyboard.press('Enter');
      const response = await patched;
      seen.patchStatus = response.status();
      seen.patchBody = JSON.parse(response.request().postData());
      await waitListed(a, chatId, TITLE, 'rename');
      seen.title = await chat.getByTestId('chat-title').textContent();
      seen.focusBack = await isFocused(chat.getByTestId('rename'));
      seen.snapshot = await snapshot(a);
      await axe(a, 'desktop');
    });

    const contextB = await newContext(browser);
    b = await contextB.newPage();
    watch(b, 'B');

    await step('second', () => b, async seen => {
      await openChat(b, chatUrl('ws'), 4, 'second');
      seen.snapshot = await snapshot(b);
      seen.same = JSON.stringify(seen.snapshot) === JSON.stringify(steps.rename.snapshot);
      seen.transport = await b.getByTestId('transport').inputValue();
      await waitListed(b, chatId, TITLE, 'second');
      seen.listed = await listed(b);
      seen.loads = traffic.chatsApi.filter(c => c.page === 'B' && c.method === 'GET' && c.path === `/api/chats/${chatId}`).map(c => c.status);
    });

    await step('continueB', () => b, async seen => {
      const before = framesOf(chatId, 'B').length;
      const index = await send(b, '/echo hello from B');
      seen.text = await waitForText(b, index, /^hello from B$/, 'continueB');
      await settled(b, 6, 'continueB');
      seen.frames = framesOf(chatId, 'B').slice(before).map(frame => ({
        messages: frame.messages.length,
        role: frame.messages[0]?.role,
        text: frame.messages[0]?.parts?.map(p => p.text ?? '').join(''),
        bodyMessageIsIt: JSON.stringify(frame.body?.message) === JSON.stringify(frame.messages[0]),
        trigger: frame.trigger,
      }));
      seen.snapshot = await snapshot(b);
    });

    await step('reloadA', () => a, async seen => {
      await a.reload({ waitUntil: 'domcontentloaded' });
      await settled(a, 6, 'reloadA');
      seen.snapshot = await snapshot(a);
      seen.same = JSON.stringify(seen.snapshot) === JSON.stringify(steps.continueB.snapshot);
      seen.chatId = chatIdOf(a);
    });

    await step('pending', () => b, async seen => {
      // A asks; the approval waits.
      const index = await send(a, PENDING_PAYMENT);
      await toolPart(a, index, 'process_payment').getByTestId('approval-buttons').waitFor();
      await settled(a, 8, 'pending, asked in A');
      seen.askedInA = await toolPart(a, index, 'process_payment').getAttribute('data-state');
      // B reloads (over SSE now): the approval is there, answerable.
      await openChat(b, chatUrl('sse'), 8, 'pending, B reloaded');
      const tool = toolPart(b, index, 'process_payment');
      seen.stateInB = await tool.getAttribute('data-state');
      seen.buttonsInB = await tool.getByTestId('approve-once').isVisible();
      seen.snapshotB = await snapshot(b);
      seen.snapshotA = await snapshot(a);
      const before = postsOf(chatId, 'B').length;
      await tool.getByTestId('approve-once').click();
      await tool.and(b.locator('[data-state="output-available"]')).waitFor();
      seen.text = await waitForText(b, index, /process_payment -> /, 'pending, approved in B');
      await settled(b, 8, 'pending, approved in B');
      await b.waitForTimeout(QUIET_MS);
      seen.continuations = postsOf(chatId, 'B').slice(before).map(describeBody);
      seen.output = JSON.parse(await tool.getByTestId('tool-output').textContent());
      // A reloads: answered there too.
      await a.reload({ waitUntil: 'domcontentloaded' });
      await settled(a, 8, 'pending, A reloaded');
      seen.stateInAAfter = await toolPart(a, index, 'process_payment').getAttribute('data-state');
      seen.sameAfter = JSON.stringify(await snapshot(a)) === JSON.stringify(await snapshot(b));
    });

    await step('phone', () => steps.phone.page, async seen => {
      const context = await newContext(browser, { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
      const phone = await context.newPage();
      Object.defineProperty(seen, 'page', { value: phone, enumerable: false });
      watch(phone, 'phone');
      await phone.goto(`${BASE_URL}/`, { waitUntil: 'domcontentloaded' });
      await status(phone, 'ready').waitFor();
      const toggle = phone.getByTestId('chats-toggle');
      const sidebar = phone.getByTestId('sidebar');
      seen.toggleName = await toggle.textContent();
      seen.expandedBefore = await toggle.getAttribute('aria-expanded');
      seen.sidebarVisibleBefore = await sidebar.isVisible();
      seen.overflowPx = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      await toggle.tap();
      await sidebar.waitFor({ state: 'visible' });
      seen.expandedOpen = await toggle.getAttribute('aria-expanded');
      await waitListed(phone, chatId, TITLE, 'phone');
      await axe(phone, 'phone');
      await screenshot(phone, 'phone-sidebar-open');
      await item(phone, chatId).getByTestId('chat-link').focus();
      await phone.keyboard.press('Escape');
      await sidebar.waitFor({ state: 'hidden' });
      seen.focusOnToggle = await isFocused(toggle);
      await toggle.tap();
      await item(phone, chatId).getByTestId('chat-link').tap();
      await settled(phone, 8, 'phone');
      seen.chatId = chatIdOf(phone);
      seen.sidebarVisibleAfter = await sidebar.isVisible();
      seen.expandedAfter = await toggle.getAttribute('aria-expanded');
    });
    await steps.phone?.page?.context().close();

    await step('delete', () => b, async seen => {
      const chat = item(a, chatId);
      await chat.getByTestId('delete').click();
      const cancel = chat.getByTestId('delete-cancel');
      await cancel.waitFor();
      seen.cancelFocused = await isFocused(cancel);
      seen.question = await chat.getByTestId('delete-confirmation').getAttribute('aria-label');
      await screenshot(a, 'delete-asked');
      const deleted = a.waitForResponse(r => r.request().method() === 'DELETE' && new URL(r.url()).pathname === `/api/chats/${chatId}`);
      await chat.getByTestId('delete-confirm').click();
      seen.deleteStatus = (await deleted).status();
      await chat.waitFor({ state: 'detached' });
      await a.waitForURL(url => url.searchParams.get('chat') !== chatId);
      await messages(a).first().waitFor({ state: 'detached' });
      seen.aChatAfter = chatIdOf(a);
      seen.aMessagesAfter = await messages(a).count();
      seen.aListedAfter = (await listed(a)).map(c => c.id);
      // B opens the deleted chat's URL: not found, handled.
      expected404.add(`/api/chats/${chatId}`);
      await b.goto(chatUrl('sse'), { waitUntil: 'domcontentloaded' });
      const notice = b.getByTestId('chat-notice');
      await notice.waitFor();
      await status(b, 'ready').waitFor();
      seen.notice = await notice.textContent();
      seen.bChatAfter = chatIdOf(b);
      seen.bMessagesAfter = await messages(b).count();
      seen.bListedAfter = (await listed(b)).map(c => c.id);
      seen.loadStatus = traffic.chatsApi.filter(c => c.page === 'B' && c.method === 'GET' && c.path === `/api/chats/${chatId}`).at(-1)?.status;
      // The new chat works.
      const index = await send(b, '/echo after delete');
      seen.textAfter = await waitForText(b, index, /^after delete$/, 'after delete');
      await settled(b, 2, 'after delete');
    });
  } finally {
    await browser.close();
  }
}

await runAndReport(main, result, { fail, started });

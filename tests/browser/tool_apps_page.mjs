// Drives the chat page (web/) in Debian's headless Chromium against a gateway serving the agents
// folder tests/browser/tool_apps (two apps on the offline `scripted` model, each with tools of its
// own), and against the demo agent's gateway.
//
//   node tool_apps_page.mjs '{"url": "http://127.0.0.1:8080", "demoUrl": "http://127.0.0.1:8081"}'
//
// With the two apps (SSE):
//   the picker ("App") lists them; the suggestions under the message box are the chosen app's
//   tools (name, badges, what a click does) and the scripted model's commands;
//   garden_app: a tool without arguments runs on a click; one with a required argument writes its
//   call in the message box with that argument selected, typing fills it and Enter runs it; one
//   that needs approval asks, and runs once allowed;
//   lights_app (picked in the picker): its own suggestions, a new chat, a click runs its tool and
//   the request names the app; after a reload the app and its suggestions are kept.
// With the demo agent: no picker (one app), the demo's hand-written suggestions, and a click runs
// get_weather with its example argument.
// axe-core runs on the suggestions. Any console error, page error or /api/ response >= 400 fails
// the run. Every wait is a condition with a timeout.
//
// Prints progress on stderr and one JSON line on stdout: {ok, failures, picker, garden, lights, reload, demo, axe, ...}.
// Exit code 0 only when ok.

import { mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { launchChromium, messages, status, chatIdOf, screenshotter, textOf, waitForText as waitForMessageText, runAndReport } from './browser.mjs';

const config = JSON.parse(process.argv[2] ?? '{}');
const BASE_URL = String(config.url ?? 'http://127.0.0.1:8080').replace(/\/$/, '');
const DEMO_URL = config.demoUrl ? String(config.demoUrl).replace(/\/$/, '') : '';
const SCREENSHOT_DIR = config.screenshotDir ?? path.resolve('screenshots');
const EXECUTABLE = config.executablePath ?? '/usr/bin/chromium';
const STEP_TIMEOUT_MS = config.stepTimeoutMs ?? 15_000;
const QUIET_MS = 500; // after a fill: long enough for a request to show itself
const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

const started = Date.now();
const log = line => process.stderr.write(`[tool_apps_page ${((Date.now() - started) / 1000).toFixed(1)}s] ${line}\n`);

const failures = [];
const consoleLines = [];
const result = {
  ok: false,
  failures,
  picker: {},
  garden: {},
  lights: {},
  reload: {},
  demo: {},
  axe: {},
  console: consoleLines,
  screenshots: [],
};

function fail(message) {
  log(`FAIL: ${message}`);
  failures.push(message);
}

/** POST /api/chat bodies, in order. */
const posts = [];

function watch(page, name) {
  page.on('console', message => {
    consoleLines.push(`${name} ${message.type()}: ${message.text()}`);
    if (message.type() === 'error') fail(`${name} console error: ${message.text()}`);
  });
  page.on('pageerror', error => fail(`${name} page error: ${error.stack ?? error.message}`));
  page.on('crash', () => fail(`${name} crashed`));
  page.on('request', request => {
    const { pathname } = new URL(request.url());
    if (pathname === '/api/chat' && request.method() === 'POST') posts.push(JSON.parse(request.postData()));
  });
  page.on('response', response => {
    const { pathname } = new URL(response.url());
    if (pathname.startsWith('/api/') && response.status() >= 400) {
      fail(`${name}: ${response.request().method()} ${pathname} answered ${response.status()}`);
    }
  });
}

// --- the page ----------------------------------------------------------------------------------

const chip = (page, tool) => page.locator(`[data-testid="suggestion"][data-tool-name="${tool}"]`);
const toolPart = (page, index, name) =>
  messages(page).nth(index).locator(`[data-testid="tool-part"][data-tool-name="${name}"]`);

const screenshot = screenshotter(SCREENSHOT_DIR, result);

/** `waitForText` of browser.mjs, with this script's step timeout. */
const waitForText = (page, index, pattern, label, options = {}) =>
  waitForMessageText(page, index, pattern, label, { timeout: STEP_TIMEOUT_MS, ...options });

/** The suggestions shown now: each tool's (name, what a click does, its text, badges, detail) and the commands. */
async function suggestionsOf(page) {
  return page.evaluate(() => ({
    tools: [...document.querySelectorAll('[data-testid="suggestion"]')].map(button => ({
      tool: button.dataset.toolName,
      action: button.dataset.action,
      text: button.dataset.text,
      badges: [...button.querySelectorAll('[data-testid="suggestion-badge"]')].map(badge => badge.textContent),
      detail: button.querySelector('.suggestion-detail')?.textContent ?? '',
      disabled: button.disabled,
    })),
    commands: [...document.querySelectorAll('[data-testid="command"]')].map(button => button.textContent),
    groups: [...document.querySelectorAll('[data-testid="suggestions"] [role="group"]')].map(group =>
      group.getAttribute('aria-label'),
    ),
  }));
}

/** Clicks the suggestion of `tool`; returns the index of the answer's message. */
async function clickSuggestion(page, tool) {
  await status(page, 'ready').waitFor();
  const before = await messages(page).count();
  await chip(page, tool).click();
  await messages(page).nth(before + 1).waitFor();
  return before + 1;
}

/** What one turn shows: the user's message, the tool part's state and input, the answer's text. */
async function turnOf(page, index, tool, textPattern, label) {
  const part = toolPart(page, index, tool);
  await part.waitFor();
  const seen = { userText: await textOf(page, index - 1) };
  seen.text = await waitForText(page, index, textPattern, label);
  await status(page, 'ready').waitFor();
  seen.state = await part.getAttribute('data-state');
  seen.input = JSON.parse((await part.getByTestId('tool-input').textContent()) || 'null');
  return seen;
}

/** Picks `app` in the picker (by its label, "App"): a new chat. */
async function pickApp(page, app) {
  const picker = page.getByLabel('App', { exact: true });
  const before = chatIdOf(page);
  await picker.selectOption(app);
  await page.waitForURL(url => url.searchParams.get('chat') !== before && url.searchParams.get('app') === app);
  await messages(page).first().waitFor({ state: 'detached' });
  await status(page, 'ready').waitFor();
}

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

/** Runs one part of the scenario; a failure is recorded and the next part still runs. */
async function step(name, page, body) {
  try {
    await body();
    await screenshot(page, name);
    log(`${name}: ${JSON.stringify(result[name] ?? {})}`);
  } catch (error) {
    fail(`${name}: ${error.stack ?? error}`);
    await screenshot(page, `${name}-failed`).catch(() => undefined);
  }
}

// --- the two apps ------------------------------------------------------------------------------

async function garden(page) {
  const seen = result.garden;
  await chip(page, 'water_plants').waitFor();
  seen.suggestions = await suggestionsOf(page);

  // No arguments: a click runs it.
  let before = posts.length;
  let index = await clickSuggestion(page, 'water_plants');
  seen.water = await turnOf(page, index, 'water_plants', /^water_plants -> /, 'water_plants');
  seen.water.apps = posts.slice(before).map(body => body.app);

  // A required argument: the click writes the call, with the argument selected, and sends nothing.
  before = posts.length;
  await chip(page, 'plant_seeds').click();
  const input = page.getByTestId('input');
  await page.waitForFunction(() =>
    document.querySelector('[data-testid="input"]').value.startsWith('/tool plant_seeds'),
  );
  await page.waitForTimeout(QUIET_MS);
  seen.fill = await input.evaluate(box => ({
    value: box.value,
    selected: box.value.slice(box.selectionStart, box.selectionEnd),
    caret: box.selectionStart,
    focused: document.activeElement === box,
  }));
  seen.fill.requests = posts.length - before;
  seen.fill.messages = await messages(page).count();
  await page.keyboard.type('tulips');
  seen.fill.typed = await input.inputValue();
  const count = await messages(page).count();
  await page.keyboard.press('Enter');
  index = count + 1;
  await messages(page).nth(index).waitFor();
  seen.plant = await turnOf(page, index, 'plant_seeds', /^plant_seeds -> /, 'plant_seeds');

  // It needs approval: asked, then allowed once, it runs.
  index = await clickSuggestion(page, 'harvest');
  const part = toolPart(page, index, 'harvest');
  await part.getByTestId('approval-buttons').waitFor();
  seen.harvestAsked = await part.getAttribute('data-state');
  await part.getByTestId('approve-once').click();
  seen.harvest = await turnOf(page, index, 'harvest', /^harvest -> /, 'harvest');
  await axe(page, 'garden');
}

async function lights(page) {
  const seen = result.lights;
  const chatBefore = chatIdOf(page);
  await pickApp(page, 'lights_app');
  await chip(page, 'lights_status').waitFor();
  seen.newChat = chatIdOf(page) !== chatBefore;
  seen.url = new URL(page.url()).searchParams.get('app');
  seen.suggestions = await suggestionsOf(page);
  const before = posts.length;
  const index = await clickSuggestion(page, 'lights_status');
  seen.status = await turnOf(page, index, 'lights_status', /^lights_status -> /, 'lights_status');
  seen.status.apps = posts.slice(before).map(body => body.app);
  await axe(page, 'lights');
}

async function reload(page) {
  const seen = result.reload;
  await page.reload({ waitUntil: 'domcontentloaded' });
  await chip(page, 'lights_status').waitFor();
  seen.app = await page.getByLabel('App', { exact: true }).inputValue();
  seen.tools = (await suggestionsOf(page)).tools.map(suggestion => suggestion.tool);
  seen.messages = await messages(page).count();
}

// --- the demo agent ----------------------------------------------------------------------------

async function demo(page) {
  const seen = result.demo;
  await page.goto(`${DEMO_URL}/`, { waitUntil: 'domcontentloaded' });
  await status(page, 'ready').waitFor();
  await chip(page, 'get_weather').waitFor();
  seen.pickers = await page.getByLabel('App', { exact: true }).count();
  seen.suggestions = await suggestionsOf(page);
  const index = await clickSuggestion(page, 'get_weather');
  seen.weather = await turnOf(page, index, 'get_weather', /^get_weather -> /, 'get_weather');
}

async function main() {
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
  const browser = await launchChromium(EXECUTABLE);
  result.browserVersion = browser.version();
  try {
    const context = await browser.newContext({ viewport: { width: 1100, height: 900 } });
    context.setDefaultTimeout(STEP_TIMEOUT_MS);
    const page = await context.newPage();
    watch(page, 'apps');
    await page.goto(`${BASE_URL}/`, { waitUntil: 'domcontentloaded' });
    await status(page, 'ready').waitFor();
    const picker = page.getByLabel('App', { exact: true });
    await picker.waitFor();
    result.picker.options = await picker.locator('option').allTextContents();
    result.picker.initial = await picker.inputValue();

    await step('garden', page, () => garden(page));
    await step('lights', page, () => lights(page));
    await step('reload', page, () => reload(page));
    await context.close();

    if (DEMO_URL) {
      // A user of its own: the chats of the other pages' tests on that gateway are not this one's.
      const demoContext = await browser.newContext({
        viewport: { width: 1100, height: 900 },
        extraHTTPHeaders: { 'x-user-id': 'suggestions-page' },
      });
      demoContext.setDefaultTimeout(STEP_TIMEOUT_MS);
      const demoPage = await demoContext.newPage();
      watch(demoPage, 'demo');
      await step('demo', demoPage, () => demo(demoPage));
      await demoContext.close();
    }
  } finally {
    await browser.close();
  }
}

await runAndReport(main, result, { fail, started });

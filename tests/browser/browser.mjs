// Headless Debian Chromium for the page tests, launched the same way by every script, and the
// chat page as the scripts read it.
import path from 'node:path';
import { chromium } from 'playwright-core';

/**
 * Launches Chromium headless. The background-networking flags keep it from reaching for
 * Google's hosts, which this machine's closed network refuses many times over. With
 * `fakeAudioCapture` (a WAV file), getUserMedia gets that file as its microphone (looped) and
 * is allowed without a prompt.
 * @param {string} executablePath
 * @param {{fakeAudioCapture?: string}} [options]
 */
export function launchChromium(executablePath, { fakeAudioCapture } = {}) {
  const media = fakeAudioCapture
    ? [
        '--use-fake-ui-for-media-stream',
        '--use-fake-device-for-media-stream',
        `--use-file-for-fake-audio-capture=${fakeAudioCapture}`,
      ]
    : [];
  return chromium.launch({
    executablePath,
    headless: true,
    args: [
      '--headless=new',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      ...media,
    ],
    timeout: 30_000,
  });
}

// --- the chat page, as every page script reads it ----------------------------------------------

/** The page's messages, in order. */
export const messages = page => page.locator('[data-testid="message"]');

/** The chat's status indicator when it shows `value` (ready, submitted, streaming, error). */
export const status = (page, value) => page.locator(`[data-testid="status"][data-status="${value}"]`);

/** The chat id the page put in its URL. */
export const chatIdOf = page => new URL(page.url()).searchParams.get('chat');

/** The joined text parts of message `index`. */
export async function textOf(page, index) {
  return (await messages(page).nth(index).locator('[data-testid="text-part"]').allTextContents()).join('');
}

/**
 * Waits (at most `timeout` ms) until the text of message `index` matches `pattern` and (unless
 * `streaming`) no text part of it is still streaming; returns that text. `label` names the step
 * in the error.
 */
export async function waitForText(page, index, pattern, label, { timeout, streaming = false }) {
  try {
    await page.waitForFunction(
      ({ index, source, streaming }) => {
        const message = document.querySelectorAll('[data-testid="message"]')[index];
        const parts = [...(message?.querySelectorAll('[data-testid="text-part"]') ?? [])];
        const done = streaming || parts.every(part => part.dataset.state !== 'streaming');
        return done && new RegExp(source).test(parts.map(n => n.textContent).join(''));
      },
      { index, source: pattern.source, streaming },
      { timeout },
    );
  } catch (error) {
    throw new Error(`${label}: message ${index} reads ${JSON.stringify(await textOf(page, index))}, expected ${pattern} (${error.message})`);
  }
  return textOf(page, index);
}

/** A `screenshot(page, name, options)` that saves `name`.png in `dir` and lists it in `result.screenshots`. */
export function screenshotter(dir, result) {
  return async (page, name, options = {}) => {
    const file = path.join(dir, `${name}.png`);
    await page.screenshot({ path: file, ...options });
    result.screenshots.push(file);
  };
}

/** Types `text` in the composer and sends it with Enter once the chat is ready; returns the index of the answer's message. */
export async function send(page, text) {
  await status(page, 'ready').waitFor();
  const before = await messages(page).count();
  await page.getByTestId('input').fill(text);
  await page.getByTestId('input').press('Enter');
  await messages(page).nth(before + 1).waitFor();
  return before + 1;
}

/**
 * Runs a page script's `main` (an error it throws is a failure: `fail`), then `finish()` if given,
 * and prints `result` (with its `seconds` since `started` and `ok`: no `result.failures`) as the
 * script's one JSON line; the exit status says whether it is ok.
 */
export async function runAndReport(main, result, { fail, started, finish = () => {} }) {
  try {
    await main();
  } catch (error) {
    fail(`driver: ${error.stack ?? error}`);
  }
  result.seconds = (Date.now() - started) / 1000;
  finish();
  result.ok = result.failures.length === 0;
  process.stdout.write(`${JSON.stringify(result)}\n`);
  process.exitCode = result.ok ? 0 : 1;
}

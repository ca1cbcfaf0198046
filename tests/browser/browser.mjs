// Headless Debian Chromium for the page tests, launched the same way by every script.
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

// Headless Debian Chromium for the page tests, launched the same way by every script.
import { chromium } from 'playwright-core';

/**
 * Launches Chromium headless. The background-networking flags keep it from reaching for
 * Google's hosts, which this machine's closed network refuses many times over.
 * @param {string} executablePath
 */
export function launchChromium(executablePath) {
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
    ],
    timeout: 30_000,
  });
}

// Loads the probe page a gateway serves (tests/integration/test_page_csp.py writes it) in Debian's
// headless Chromium and reports what the page's Content-Security-Policy let through, as one JSON
// line: the styles of a sandboxed <iframe srcdoc> (Google's search suggestions are shown that way),
// what the page's own script saw, and the console's CSP messages.
import { chromium } from '../browser/node_modules/playwright-core/index.mjs';

const { url, executablePath } = JSON.parse(process.argv[2]);
const browser = await chromium.launch({
  executablePath,
  headless: true,
  args: ['--headless=new', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
  timeout: 30_000,
});
const result = { console: [] };
try {
  const page = await browser.newPage();
  page.on('console', message => result.console.push(message.text()));
  await page.goto(url);
  await page.waitForFunction(() => window.probe?.done === true, null, { timeout: 20_000 });
  result.page = await page.evaluate(() => window.probe);
  const frame = page.frames().find(f => f.url() === 'about:srcdoc');
  result.suggestions = frame
    ? await frame.evaluate(() => ({
        background: getComputedStyle(document.body).backgroundColor,
        chip: getComputedStyle(document.querySelector('.chip')).color,
        margin: getComputedStyle(document.body).margin,
      }))
    : null;
  result.ok = true;
} catch (error) {
  result.ok = false;
  result.error = String(error?.stack ?? error);
} finally {
  await browser.close();
}
console.log(JSON.stringify(result));

// Drives the web chat page in headless Chromium on a phone-sized screen and prints a JSON
// report on stdout: what the page showed while streaming and when done. Run by
// tests/chat/test_chat_page.py with CHAT_URL (the page) and SHOT (a screenshot path).
import { chromium } from "playwright-core";

const url = process.env.CHAT_URL;
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const report = {};
try {
  const context = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2,
                                             isMobile: true, hasTouch: true });
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  await page.goto(url);
  report.title = await page.title();

  async function send(text) {
    const before = await page.locator(".assistant").count();
    await page.fill("#input", text);
    await page.press("#input", "Enter");
    return page.locator(".assistant").nth(before);
  }

  // 1. a slow reply is visible while it streams, then complete
  const slow = await send("SLOW 25");
  await page.waitForFunction((el) => el.textContent.length > 0 && el.dataset.state === "streaming",
                             await slow.elementHandle(), { timeout: 15000 });
  report.partial = await slow.textContent();
  await page.waitForFunction((el) => el.dataset.state === "done", await slow.elementHandle(), { timeout: 15000 });
  report.streamed = await slow.textContent();

  // 2. markup in a message and in the reply stays text
  const echo = await send("hi <b>bold</b> <img src=x onerror=alert(1)>");
  await page.waitForFunction((el) => el.dataset.state === "done", await echo.elementHandle(), { timeout: 15000 });
  report.echo = await echo.textContent();
  report.injected = await page.evaluate(() => document.querySelectorAll("#log b, #log img").length);
  report.session = await page.evaluate(() => Object.entries(localStorage)
    .filter(([k]) => k.startsWith("wds-chat-session:")).map(([, v]) => v)[0] || null);

  // 3. the session survives a reload (history grows)
  await page.reload();
  const after = await send("again");
  await page.waitForFunction((el) => el.dataset.state === "done", await after.elementHandle(), { timeout: 15000 });
  report.afterReload = await after.textContent();

  report.overflow = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth);
  report.viewportMeta = await page.evaluate(() => !!document.querySelector('meta[name="viewport"]'));
  if (process.env.SHOT) await page.screenshot({ path: process.env.SHOT });
  report.errors = errors;
} finally {
  await browser.close();
}
console.log(JSON.stringify(report));

// Drives VS Code in the browser (code-server) with headless Chromium for the
// Rust tests (tests/src/vscode.rs). It reads one JSON command per line on
// stdin and answers each with one JSON line on stdout, {"id", "ok": true,
// "value"?} or {"id", "error"}, so the test decides every step and checks
// the service in between. Logs go to stderr.
//
//   {"id": 1, "op": "open", "url": "http://127.0.0.1:PORT/?folder=/ws"}
//   {"id": 2, "op": "press", "keys": ["Control+p"]}
//   {"id": 3, "op": "type", "text": "a.txt"}
//   {"id": 4, "op": "waitFor", "selector": ".monaco-editor", "state"?: "hidden", "timeoutMs"?: 20000}
//   {"id": 5, "op": "click", "role": "button", "name": "Accept", "timeoutMs": 20000}
//   {"id": 6, "op": "text", "selector": ".notifications-toasts"}
//   {"id": 7, "op": "screenshot", "path": "/tmp/shot.png"}
//   {"id": 8, "op": "close"}
const { chromium } = require('playwright-core');
const readline = require('readline');

const CHROMIUM = process.env.MOONKALE_CHROMIUM || '/usr/bin/chromium';
// Without the background-networking flags Chromium keeps dialing Google's
// hosts, which this machine's closed network refuses.
const ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

let browser;
let page;

const ops = {
  // viewport: {width, height} (default 1280×800); mobile: a phone's touch
  // and pixel ratio (the Moonkale shell's tests).
  async open({ url, viewport = { width: 1280, height: 800 }, mobile = false }) {
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS, headless: true });
    const phone = mobile ? { isMobile: true, hasTouch: true, deviceScaleFactor: 3 } : {};
    page = await browser.newPage({ viewport, ...phone });
    page.on('pageerror', (e) => console.error(`[pageerror] ${e}`));
    page.on('dialog', (d) => {
      console.error(`[dialog] ${d.message()}`);
      d.dismiss();
    });
    page.on('console', (m) => {
      if (m.type() === 'error') console.error(`[page] ${m.text()}`);
    });
    await page.goto(url);
  },
  // state: "visible" (the default) or "hidden" (gone or never there).
  async waitFor({ selector, state = 'visible', timeoutMs = 30000 }) {
    await page.waitForSelector(selector, { state, timeout: timeoutMs });
  },
  async press({ keys }) {
    for (const k of keys) await page.keyboard.press(k);
  },
  async type({ text }) {
    await page.keyboard.type(text);
  },
  async click({ role, name, selector, timeoutMs = 30000 }) {
    const target = selector
      ? page.locator(selector).first()
      : page.getByRole(role, { name, exact: true }).first();
    await target.click({ timeout: timeoutMs });
  },
  async text({ selector }) {
    return page.locator(selector).allInnerTexts();
  },
  // Fills a text box found by role and exact accessible name.
  async fill({ role, name, text, timeoutMs = 30000 }) {
    await page.getByRole(role, { name, exact: true }).first().fill(text, { timeout: timeoutMs });
  },
  async title() {
    return page.title();
  },
  // Whether the page's layout scrolls sideways (wider than its viewport).
  async scrollsSideways() {
    return page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth);
  },
  // What an <input> or <textarea> holds.
  async value({ selector }) {
    return page.locator(selector).first().inputValue();
  },
  // Chooses `value` in a <select> found by its exact accessible name.
  async select({ name, value, timeoutMs = 30000 }) {
    await page.getByRole('combobox', { name, exact: true }).first()
      .selectOption(value, { timeout: timeoutMs });
  },
  // The page's size changed, as a window resized or a phone turned.
  async viewport({ width, height }) {
    await page.setViewportSize({ width, height });
  },
  async screenshot({ path }) {
    await page.screenshot({ path });
  },
  async close() {
    await browser?.close();
    browser = undefined;
  },
};

// One command at a time, in order: the test waits for each answer.
let queue = Promise.resolve();
const reply = (o) => process.stdout.write(JSON.stringify(o) + '\n');
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  queue = queue.then(async () => {
    let cmd;
    try {
      cmd = JSON.parse(line);
      const op = ops[cmd.op];
      if (!op) throw new Error(`unknown op ${JSON.stringify(cmd.op)}`);
      const value = await op(cmd);
      reply({ id: cmd.id, ok: true, value });
    } catch (e) {
      reply({ id: cmd?.id ?? null, error: String(e && e.stack ? e.stack : e) });
    }
  });
}).on('close', () => {
  queue.then(() => browser?.close()).finally(() => process.exit(0));
});

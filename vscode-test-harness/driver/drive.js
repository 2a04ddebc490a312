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
//
// For the benchmarks (tests/src/bin/bench/web.rs), times are the page's
// clock as epoch milliseconds (performance.timeOrigin + performance.now()):
//   {"op": "openCounted", "url": …, "viewport"?, "mobile"?, "ready": "nav.tabs"}
//     opens the page, counting every byte and request of its first load
//   {"op": "loadCounted", "url": …, "ready": …} the same in a new context,
//     closed after (a second first load)
//   {"op": "openMore", "url": …, "count": 19, "ready": …} more pages of the
//     first page's context (its cookie); {"op": "closeMore"}
//   {"op": "clock"}; {"op": "watch", "selector", "text"?}, then
//   {"op": "watched"}: when it first matched; {"op": "keyEcho", "key",
//   "selector", "text"}: a key's keydown in the page and its echo seen
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
// The bench's other pages (openMore), in page's context.
let more = [];
// What went wrong in the page (see `problems`).
let problems = [];

const launch = async () => {
  browser ??= await chromium.launch({ executablePath: CHROMIUM, args: ARGS, headless: true });
};

const contextOptions = (viewport, mobile) => ({
  viewport,
  ...(mobile ? { isMobile: true, hasTouch: true, deviceScaleFactor: 3 } : {}),
});

// Opens `url` in a new page of `context` and counts what its first load
// transfers, through the DevTools protocol's network events: each HTTP
// answer's bytes on the wire (head and body, redirects too), the
// WebSocket's handshake and every frame (payload and frame header) until
// `ready` shows and then `quietMs` pass without a frame or a request.
// Every URL asked for is listed, so the caller can check its origin.
async function counted(context, url, ready, quietMs) {
  // Each WebSocket message's arrival in the page (the page's clock, the
  // last 64), stamped before the page's own handlers run.
  await context.addInitScript(() => {
    const Native = window.WebSocket;
    window.__mkFrames = [];
    window.WebSocket = function (url, protocols) {
      const ws = new Native(url, protocols);
      ws.addEventListener('message', () => {
        window.__mkFrames.push(performance.timeOrigin + performance.now());
        if (window.__mkFrames.length > 64) window.__mkFrames.shift();
      });
      return ws;
    };
    window.WebSocket.prototype = Native.prototype;
    Object.assign(window.WebSocket, Native);
  });
  const p = await context.newPage();
  const cdp = await context.newCDPSession(p);
  const requests = new Map();
  const urls = [];
  const ws = { url: null, handshake: 0, framesIn: 0, bytesIn: 0, framesOut: 0, bytesOut: 0 };
  let last = Date.now();
  const frameBytes = (r) => {
    const n = r.opcode === 2 ? Buffer.from(r.payloadData, 'base64').length : Buffer.byteLength(r.payloadData, 'utf8');
    return n + (n < 126 ? 2 : n < 65536 ? 4 : 10);
  };
  cdp.on('Network.requestWillBeSent', (e) => {
    last = Date.now();
    urls.push(e.request.url);
    if (e.redirectResponse) {
      const r = requests.get(e.requestId);
      if (r) requests.set(e.requestId + '/' + urls.length, { ...r, bytes: e.redirectResponse.encodedDataLength, status: e.redirectResponse.status });
    }
    requests.set(e.requestId, { url: e.request.url, bytes: 0, status: null });
  });
  cdp.on('Network.responseReceived', (e) => {
    const r = requests.get(e.requestId);
    if (r) r.status = e.response.status;
  });
  cdp.on('Network.loadingFinished', (e) => {
    last = Date.now();
    const r = requests.get(e.requestId);
    if (r) r.bytes = e.encodedDataLength;
  });
  cdp.on('Network.webSocketCreated', (e) => {
    last = Date.now();
    ws.url = e.url;
    urls.push(e.url);
  });
  cdp.on('Network.webSocketHandshakeResponseReceived', (e) => {
    const h = e.response.headersText;
    ws.handshake = h ? Buffer.byteLength(h, 'utf8')
      : Object.entries(e.response.headers).reduce((n, [k, v]) => n + k.length + String(v).length + 4, 0) + 20;
  });
  cdp.on('Network.webSocketFrameReceived', (e) => {
    last = Date.now();
    ws.framesIn += 1;
    ws.bytesIn += frameBytes(e.response);
  });
  cdp.on('Network.webSocketFrameSent', (e) => {
    ws.framesOut += 1;
    // Frames from a browser are masked: 4 bytes more.
    ws.bytesOut += frameBytes(e.response) + 4;
  });
  await cdp.send('Network.enable');
  await cdp.send('Network.setCacheDisabled', { cacheDisabled: true });
  const started = Date.now();
  await p.goto(url);
  await p.waitForSelector(ready, { timeout: 30000 });
  const readyMs = Date.now() - started;
  while (Date.now() - last < quietMs) await new Promise((r) => setTimeout(r, 50));
  await cdp.detach();
  return { page: p, stats: { requests: [...requests.values()], urls, ws, readyMs } };
}

// The page's clock (epoch ms) and the watch of `selector` (with `text` in
// its text, if given): the instant a MutationObserver first sees it match,
// and the next animation frame after that (when it is painted).
function armWatch([selector, text]) {
  const now = () => performance.timeOrigin + performance.now();
  const matches = () => {
    for (const el of document.querySelectorAll(selector)) {
      if (text === null || el.textContent.includes(text)) return true;
    }
    return false;
  };
  window.__mkWatch = new Promise((resolve) => {
    let done = false;
    const check = () => {
      if (done || !matches()) return;
      done = true;
      const at = now();
      observer.disconnect();
      // The last WebSocket message that came before (what brought it).
      const message = (window.__mkFrames || []).filter((t) => t <= at).pop() ?? null;
      requestAnimationFrame(() => resolve({ at, frame: now(), message }));
    };
    const observer = new MutationObserver(check);
    observer.observe(document, { subtree: true, childList: true, characterData: true, attributes: true });
    check();
  });
}

function awaitWatch(timeoutMs) {
  return Promise.race([
    window.__mkWatch,
    new Promise((_, fail) => setTimeout(() => fail(new Error('the watch timed out')), timeoutMs)),
  ]);
}

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
      if (m.type() === 'error') {
        console.error(`[page] ${m.text()}`);
        problems.push(`console error: ${m.text()}`);
      }
    });
    page.on('pageerror', (e) => problems.push(`uncaught: ${e}`));
    // A policy violation is an event in the page (Chromium logs most as
    // console errors too, but not every one): each is reported here.
    await page.exposeBinding('__mkViolation', (_source, text) => problems.push(`policy violation: ${text}`));
    await page.addInitScript(() => {
      document.addEventListener('securitypolicyviolation', (e) => {
        window.__mkViolation(`${e.violatedDirective} blocked ${e.blockedURI || '(inline)'} at ${e.sourceFile}:${e.lineNumber}`);
      });
    });
    await page.goto(url);
  },
  // The console errors, uncaught errors and policy violations the page
  // had since it opened or since the last call (then forgotten).
  async problems() {
    const seen = problems;
    problems = [];
    return seen;
  },
  // Back, as a phone's Back button or a browser's arrow: the page's
  // history goes one entry back (a hash of the same page, or away).
  async back() {
    await page.goBack({ waitUntil: 'commit' });
  },
  async url() {
    return page.url();
  },
  // The element that has the keyboard: its tag, class and accessible name.
  async focused() {
    return page.evaluate(() => {
      const e = document.activeElement;
      return e ? { tag: e.tagName.toLowerCase(), className: e.className, label: e.getAttribute('aria-label') } : null;
    });
  },
  // Where each element matching `selector` is on the page (CSS pixels).
  async boxes({ selector }) {
    return page.$$eval(selector, (list) => list.map((e) => {
      const r = e.getBoundingClientRect();
      return { x: r.x, y: r.y, width: r.width, height: r.height };
    }));
  },
  // The computed colours of the first element matching `selector` whose
  // text is exactly `text`.
  async colours({ selector, text, timeoutMs = 30000 }) {
    const e = page.locator(selector).filter({ hasText: new RegExp(`^${text}$`) }).first();
    await e.waitFor({ timeout: timeoutMs });
    return e.evaluate((n) => {
      const s = getComputedStyle(n);
      return { color: s.color, background: s.backgroundColor };
    });
  },
  // A <select>'s options (found by its exact accessible name): each
  // option's label, value, and whether it is disabled or selected.
  async options({ name, timeoutMs = 30000 }) {
    const select = page.getByRole('combobox', { name, exact: true }).first();
    await select.waitFor({ timeout: timeoutMs });
    return select.evaluate((s) => [...s.options].map((o) => ({
      label: o.label, value: o.value, disabled: o.disabled, selected: o.selected,
    })));
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
  // How far the element's content is scrolled from its end, in pixels
  // (0: its last line shows).
  async scrollFromEnd({ selector }) {
    return page.$eval(selector, (e) => e.scrollHeight - e.scrollTop - e.clientHeight);
  },
  async scrollsSideways() {
    return page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth);
  },
  // The page as if hidden (another tab in front, a phone's screen off)
  // with notifications allowed: each Notification the page raises is
  // recorded instead of shown (headless Chromium has no notification
  // center); `notifications` returns them.
  async pretendHidden() {
    await page.evaluate(() => {
      Object.defineProperty(Document.prototype, 'hidden', { configurable: true, get: () => true });
      window.__raised = [];
      window.Notification = function (title, options) {
        window.__raised.push({ title, body: (options && options.body) || '' });
      };
      window.Notification.permission = 'granted';
    });
  },
  async notifications() {
    return page.evaluate(() => window.__raised || []);
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
  // Reloads the page as a person does; every response on the way until
  // `ready` shows again: its path, the entity tag the browser offered
  // (`If-None-Match`) and the body bytes that crossed the wire (Chromium
  // reports a revalidated file's status as its cached 200).
  async reload({ ready, timeoutMs = 30000 }) {
    const seen = [];
    page.on('requestfinished', (r) => seen.push(r));
    await page.reload();
    await page.waitForSelector(ready, { timeout: timeoutMs });
    page.removeAllListeners('requestfinished');
    return Promise.all(
      seen.map(async (r) => ({
        path: new URL(r.url()).pathname,
        offered: (await r.allHeaders())['if-none-match'] || null,
        bodyBytes: (await r.sizes()).responseBodySize,
      }))
    );
  },
  async openCounted({ url, viewport = { width: 1280, height: 800 }, mobile = false, ready, quietMs = 1000 }) {
    await launch();
    const context = await browser.newContext(contextOptions(viewport, mobile));
    const { page: p, stats } = await counted(context, url, ready, quietMs);
    page = p;
    page.on('pageerror', (e) => console.error(`[pageerror] ${e}`));
    return stats;
  },
  async loadCounted({ url, viewport = { width: 1280, height: 800 }, mobile = false, ready, quietMs = 1000 }) {
    await launch();
    const context = await browser.newContext(contextOptions(viewport, mobile));
    const { stats } = await counted(context, url, ready, quietMs);
    await context.close();
    return stats;
  },
  async openMore({ url, count, ready }) {
    for (let i = 0; i < count; i++) {
      const p = await page.context().newPage();
      await p.goto(url);
      await p.waitForSelector(ready, { timeout: 30000 });
      more.push(p);
    }
  },
  async closeMore() {
    for (const p of more) await p.close();
    more = [];
  },
  async clock() {
    return page.evaluate(() => performance.timeOrigin + performance.now());
  },
  async watch({ selector, text = null }) {
    await page.evaluate(armWatch, [selector, text]);
  },
  async watched({ timeoutMs = 10000 }) {
    return page.evaluate(awaitWatch, timeoutMs);
  },
  // Presses `key` and returns the page's clock at its keydown (seen first,
  // before the page's own handlers) and when `text` showed in `selector`.
  async keyEcho({ key, selector, text, timeoutMs = 10000 }) {
    await page.evaluate(armWatch, [selector, text]);
    await page.evaluate(() => {
      window.__mkKey = null;
      window.addEventListener('keydown', () => {
        window.__mkKey = performance.timeOrigin + performance.now();
      }, { capture: true, once: true });
    });
    await page.keyboard.press(key);
    const seen = await page.evaluate(awaitWatch, timeoutMs);
    const down = await page.evaluate(() => window.__mkKey);
    return { down, ...seen };
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

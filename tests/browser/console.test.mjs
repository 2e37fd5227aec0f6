// The operator console in a real browser: Debian's Chromium driven by
// puppeteer-core, against the real serve, provider-sim, webhook sink and
// Postgres that scripts/console-browser starts. It passes in:
//   CONSOLE_URL      serve's address (started with --console)
//   CONSOLE_TOKEN    an operator token (payrail operator create)
//   CONSOLE_API_KEY  a client's API key, which must not open the console
//   CONSOLE_KEY      the idempotency key of a dead-lettered transfer
//   CONSOLE_SHOTS    where screenshots go (docs/console)
//   CHROMIUM         the browser binary
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import puppeteer from "puppeteer-core";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run this through scripts/console-browser`);
  return value;
};
const BASE = env("CONSOLE_URL");
const TOKEN = env("CONSOLE_TOKEN");
const API_KEY = env("CONSOLE_API_KEY");
const KEY = env("CONSOLE_KEY");
const SHOTS = env("CONSOLE_SHOTS");
const STEP_MS = 20_000;

let browser;
before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  browser = await puppeteer.launch({
    executablePath: env("CHROMIUM"),
    headless: true,
    // Root in CI has no user namespace for Chromium's sandbox.
    args: ["--no-sandbox", "--disable-dev-shm-usage"],
    defaultViewport: { width: 1400, height: 900 },
  });
});
after(async () => {
  await browser?.close();
});

/** A fresh incognito-like context, so sessions do not leak between tests. */
async function freshPage() {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  page.setDefaultTimeout(STEP_MS);
  // Any script error or CSP violation on a console page fails the test.
  const problems = [];
  page.on("pageerror", (e) => problems.push(String(e)));
  page.on("console", (m) => {
    if (m.type() === "error" && !/status of 40[13]/.test(m.text())) problems.push(m.text());
  });
  return { page, context, problems };
}

async function signIn(page, token) {
  await page.goto(`${BASE}/console/sign-in`);
  await page.type("#token", token);
  const [response] = await Promise.all([page.waitForNavigation(), page.click("button[type=submit]")]);
  return response;
}

async function shot(page, name) {
  await page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: true });
}

async function text(page) {
  return page.evaluate(() => document.body.innerText);
}

test("a bad token and a client's API key are refused at sign-in", async () => {
  const { page, context } = await freshPage();
  for (const wrong of ["pro_not-a-token", API_KEY]) {
    const response = await signIn(page, wrong);
    assert.equal(response.status(), 401);
    assert.match(await text(page), /does not open the console/);
    assert.equal(new URL(page.url()).pathname, "/console/sign-in");
  }
  await shot(page, "sign-in-refused");
  // The API key as a bearer token opens no page either.
  await page.setExtraHTTPHeaders({ Authorization: `Bearer ${API_KEY}` });
  await page.goto(`${BASE}/console/transfers`);
  assert.equal(new URL(page.url()).pathname, "/console/sign-in");
  await context.close();
});

test("an operator finds a dead transfer by key, retries it, sees it settle, redelivers its event, and the audit shows both", async () => {
  const { page, context, problems } = await freshPage();
  const response = await signIn(page, TOKEN);
  assert.equal(response.status(), 200);
  assert.equal(new URL(page.url()).pathname, "/console/transfers");
  await shot(page, "transfers");

  // Find by idempotency key (the filter lands in the URL: bookmarkable).
  await page.type("input[name=key]", KEY);
  await Promise.all([page.waitForNavigation(), page.click("form.filters button[type=submit]")]);
  assert.equal(new URL(page.url()).searchParams.get("key"), KEY);
  const links = await page.$$eval("table.rows a[href^='/console/transfers/']", (as) => as.map((a) => a.textContent));
  assert.equal(links.length, 1, "one transfer has this key");
  const id = links[0];

  // Its timeline: the key, the failed call, the dead row.
  await Promise.all([page.waitForNavigation(), page.click(`a[href='/console/transfers/${id}']`)]);
  let body = await text(page);
  assert.match(body, new RegExp(KEY));
  assert.match(body, /dead-lettered/);
  assert.match(body, /Dead-lettered .* after 1 claims/);
  await shot(page, "timeline-dead");

  // Retry it; the provider is up now, so it settles.
  await Promise.all([page.waitForNavigation(), page.click("#attempts form button[type=submit]")]);
  const deadline = Date.now() + STEP_MS;
  for (;;) {
    body = await text(page);
    if (/succeeded/.test(body.split("Provider attempts")[0])) break;
    assert.ok(Date.now() < deadline, `the retried transfer did not settle:\n${body}`);
    await new Promise((r) => setTimeout(r, 300));
    await page.reload();
  }
  assert.match(body, /transfer\.succeeded/, "its status change made an event");
  await shot(page, "timeline");

  // Redeliver its event from its timeline (the events page's transfer
  // filter leads here too).
  await page.goto(`${BASE}/console/events?transfer=${id}`);
  assert.equal(new URL(page.url()).pathname, `/console/transfers/${id}`);
  const events = await page.$$("#events form[action$='/redeliver'] button");
  assert.equal(events.length, 1, "one event: transfer.succeeded");
  await Promise.all([page.waitForNavigation(), events[0].click()]);
  assert.match(await text(page), /deliveries are due again/);
  await shot(page, "events");

  // The audit names the operator and both actions.
  await page.goto(`${BASE}/console/audit`);
  const rows = await page.$$eval("table.audit tbody tr", (trs) => trs.map((tr) => tr.innerText));
  assert.ok(rows.some((r) => r.includes("outbox.retry") && r.includes(id)), rows.join("\n"));
  assert.ok(rows.some((r) => r.includes("event.redeliver")), rows.join("\n"));
  assert.ok(rows.every((r) => r.includes("Ada")), rows.join("\n"));
  await shot(page, "audit");
  assert.deepEqual(problems, []);
  await context.close();
});

test("a bulk retry states how many rows it touches before it touches them", async () => {
  const { page, context, problems } = await freshPage();
  await signIn(page, TOKEN);
  await page.goto(`${BASE}/console/outbox`);
  const count = Number((await text(page)).match(/(\d+) dead rows match/)[1]);
  assert.ok(count >= 1, "the other transfers are still dead");
  await shot(page, "dead-rows");
  await Promise.all([page.waitForNavigation(), page.click("form[action='/console/outbox/retry'][method=get] button")]);
  assert.equal(await page.$eval("#confirm-count", (e) => Number(e.textContent)), count);
  await shot(page, "retry-confirm");
  await Promise.all([page.waitForNavigation(), page.click("main form[method=post] button[type=submit]")]);
  assert.match(await text(page), new RegExp(`${count} rows are due again`));
  assert.deepEqual(problems, []);
  await context.close();
});

test("a state-changing request without the CSRF token is refused", async () => {
  const { page, context } = await freshPage();
  await signIn(page, TOKEN);
  await page.goto(`${BASE}/console/outbox`);
  // The browser's own session cookie goes along; the form's token does not.
  const statuses = await page.evaluate(async () => {
    const post = (path, body) =>
      fetch(path, {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body,
        redirect: "manual",
      }).then((r) => r.status);
    return [
      await post("/console/outbox/retry", "all=1"),
      await post("/console/outbox/retry", "all=1&csrf=forged"),
      await post("/console/sign-out", ""),
    ];
  });
  assert.deepEqual(statuses, [403, 403, 403]);
  // Still signed in: the refused sign-out changed nothing.
  await page.goto(`${BASE}/console/audit`);
  assert.equal(new URL(page.url()).pathname, "/console/audit");
  await context.close();
});

test("the live view refreshes its figures without a reload", async () => {
  const { page, context, problems } = await freshPage();
  await signIn(page, TOKEN);
  await page.goto(`${BASE}/console/live`);
  const marker = await page.evaluate(() => (window.__notReloaded = true));
  assert.equal(marker, true);
  await page.waitForFunction(() => /UTC$/.test(document.getElementById("live-updated").textContent));
  await page.waitForFunction(
    (first) => document.getElementById("live-updated").textContent !== first,
    {},
    await page.$eval("#live-updated", (e) => e.textContent),
  );
  assert.equal(await page.evaluate(() => window.__notReloaded), true, "no full reload");
  const creates = await page.$eval("[data-live=creates_per_second]", (e) => e.textContent);
  assert.match(creates, /^\d+\.\d$/);
  await shot(page, "live");
  await page.goto(`${BASE}/console/processing`);
  await shot(page, "processing");
  await page.goto(`${BASE}/console/endpoints`);
  await shot(page, "endpoints");
  assert.deepEqual(problems, []);
  await context.close();
});

/**
 * The browser terminal (`packages/web`, served by the registry bin at /ui) in a real headless Chromium, through
 * the whole product path: the page is the harness (Noise in the tab, the browser's WebSocket) → the relay bin →
 * our executor in remote mode. Every relay connection goes through the test-kit's relay tap, which records each
 * frame: the typed commands, their output and the API key must not be in any of them (the tap's own tests show
 * that it finds plain text that does cross it).
 *
 * The page's contract: `/ui/#env=ID`; `form#signin` with `#environment` (from #env), `#api-key`, `#remember`,
 * `#command` and `#connect`; `#status[data-state]`; the terminal in `#terminal`; `#exit-status[data-exit-code]`;
 * and `window.tether` (terminalText, state, size, echoLatencies).
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Environment, fetchBundle } from '@tether/client';
import { generateIdentity, SUITE_HYBRID_CHACHAPOLY } from '@tether/noise';
import {
  type RelayTap,
  repoRoot,
  type Stack,
  startBrowser,
  startRelayTap,
  startStack,
  type TestBrowser,
  type TestPage,
} from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ENVIRONMENT = 'browser-terminal-e2e';
/** Served by an executor on the ChaChaPoly suite (`--noise-cipher chachapoly`). */
const CHACHA_ENVIRONMENT = 'browser-terminal-chacha';
const INSECURE_HOST = 'tether.test';
const UI_DIR = join(repoRoot(), 'packages', 'web', 'dist');

interface PageHook {
  terminalText(): string;
  state(): string;
  size(): { cols: number; rows: number };
  echoLatencies(): number[];
  refreshProcesses(): Promise<void>;
}
declare const tether: PageHook;

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

let tap: RelayTap;
let stack: Stack;
let browser: TestBrowser;
/** Everything typed into a page and every output marker: none of it may cross the relay in the clear. */
const secrets = new Set<string>();

beforeAll(async () => {
  tap = await startRelayTap();
  stack = await startStack({ relayVia: tap, registryArgs: ['--ui-dir', UI_DIR] });
  await stack.startExecutor('tether', ENVIRONMENT);
  await stack.startExecutor('tether', CHACHA_ENVIRONMENT, { args: ['--noise-cipher', 'chachapoly'] });
  // tether.test is 127.0.0.1 too, but not a secure context to the browser (plain http off localhost).
  browser = await startBrowser({ args: [`--host-resolver-rules=MAP ${INSECURE_HOST} 127.0.0.1`] });
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await stack?.close();
  await tap?.close();
});

/** Opens the page for ENVIRONMENT, signs in with the harness key (not remembered) and waits for the terminal. */
async function openTerminal(command?: string, environment = ENVIRONMENT): Promise<TestPage> {
  const tab = await browser.newPage({ viewport: { width: 1000, height: 700 } });
  const { page } = tab;
  await page.goto(`${stack.registryUrl}/ui/#env=${environment}`);
  expect(await page.inputValue('form#signin input#environment')).toBe(environment);
  expect(await page.getAttribute('input#api-key', 'type')).toBe('password');
  expect(await page.isChecked('input#remember')).toBe(false);
  await page.fill('input#api-key', stack.keys.harness);
  if (command !== undefined) {
    secrets.add(command);
    await page.fill('input#command', command);
  }
  await page.click('button#connect[type="submit"]');
  await waitForState(tab, 'connected', 20_000);
  expect(await page.getAttribute('#status', 'data-state')).toBe('connected');
  return tab;
}

/** A one-time browser grant for ENVIRONMENT from the registry (`harness login --web`'s request). */
async function mintGrant(): Promise<{ url: string; grant: string }> {
  const minted = await fetch(`${stack.registryUrl}/cloud/browser-grants`, {
    method: 'POST',
    headers: { authorization: `Bearer ${stack.keys.harness}`, 'content-type': 'application/json' },
    body: JSON.stringify({ environment_id: ENVIRONMENT }),
  });
  expect(minted.status).toBe(201);
  const answer = (await minted.json()) as { url: string; grant: string };
  secrets.add(answer.grant);
  return answer;
}

/** What the page and the tap did, for a failure's message. */
function diagnostics(tab: TestPage): string {
  const roles = tap.upgrades().map((path) => new URL(path, 'ws://tap').searchParams.get('role'));
  return [
    `relay connections through the tap: ${roles.join(', ')}`,
    `page problems: ${JSON.stringify(tab.problems, null, 2)}`,
    `page console:\n${tab.console.join('\n')}`,
  ].join('\n');
}

/** Waits until the page's state is `state` (polling every `pollMs`). */
async function waitForState(tab: TestPage, state: string, timeoutMs: number, pollMs = 50): Promise<void> {
  try {
    await tab.page.waitForFunction((wanted) => tether.state() === wanted, state, {
      timeout: timeoutMs,
      polling: pollMs,
    });
  } catch (err) {
    const now = await tab.page.evaluate(() => tether.state());
    const status = await tab.page.textContent('#status');
    throw new Error(`${(err as Error).message}\nstate ${now} (${status}), not ${state}\n${diagnostics(tab)}`);
  }
}

const terminalText = (tab: TestPage) => tab.page.evaluate(() => tether.terminalText());
const lines = async (tab: TestPage) => (await terminalText(tab)).split('\n');

/** Waits until the terminal shows a line equal to `line` (or matching it) and returns every such line. */
async function waitForLine(tab: TestPage, line: string | RegExp, timeoutMs = 15_000): Promise<string[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const found = (await lines(tab)).filter((l) => (typeof line === 'string' ? l === line : line.test(l)));
    if (found.length > 0) return found;
    if (Date.now() > deadline) {
      const state = await tab.page.evaluate(() => tether.state());
      throw new Error(
        `timed out waiting for ${line} in the terminal (state ${state}):\n${await terminalText(tab)}\n${diagnostics(tab)}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Types `text` into the terminal as keystrokes, then Enter. */
async function typeLine(tab: TestPage, text: string): Promise<void> {
  secrets.add(text);
  await tab.page.keyboard.type(text);
  await tab.page.keyboard.press('Enter');
}

/** The size the remote PTY reports (`stty size`), through a line only the output has (`size=ROWS COLS`). */
async function remoteSize(tab: TestPage, nth: number): Promise<{ rows: number; cols: number }> {
  await typeLine(tab, `echo size$((${nth}))=$(stty size)`);
  const [line] = await waitForLine(tab, new RegExp(`^size${nth}=\\d+ \\d+$`));
  const [rows, cols] = (line as string)
    .replace(/^size\d+=/, '')
    .split(' ')
    .map(Number) as [number, number];
  return { rows, cols };
}

describe('browser terminal', () => {
  it('runs a login shell in a PTY: echo, size and resize, Ctrl-C, exit codes', async () => {
    const tab = await openTerminal();
    const { page } = tab;
    // The shell's first prompt: typed keys go to the shell from here on.
    await page.waitForFunction(() => tether.terminalText().trim() !== '', undefined, { timeout: 15_000 });
    await page.click('#terminal');

    await typeLine(tab, 'echo hello-$((6*7))');
    await waitForLine(tab, 'hello-42');
    const latencies = await page.evaluate(() => tether.echoLatencies());
    expect(latencies.length).toBeGreaterThan(0);
    expect(latencies.every((ms) => Number.isFinite(ms) && ms >= 0)).toBe(true);

    // The PTY has the terminal's size, and follows the window.
    const size = await page.evaluate(() => tether.size());
    expect(size.cols).toBeGreaterThan(20);
    expect(size.rows).toBeGreaterThan(5);
    expect(await remoteSize(tab, 1)).toEqual({ rows: size.rows, cols: size.cols });
    await page.setViewportSize({ width: 700, height: 450 });
    await page.waitForFunction(
      (before) => {
        const now = tether.size();
        return now.cols !== before.cols && now.rows !== before.rows;
      },
      size,
      { timeout: 10_000 },
    );
    const resized = await page.evaluate(() => tether.size());
    expect(resized.cols).toBeLessThan(size.cols);
    expect(resized.rows).toBeLessThan(size.rows);
    // process/resize reaches the PTY asynchronously: ask until it reports the new size.
    let reported = await remoteSize(tab, 2);
    for (let nth = 3; nth < 20 && (reported.rows !== resized.rows || reported.cols !== resized.cols); nth++) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      reported = await remoteSize(tab, nth);
    }
    expect(reported).toEqual({ rows: resized.rows, cols: resized.cols });

    // Ctrl-C reaches the foreground process: `sleep 100` ends by SIGINT (status 130) and the shell prompts again.
    await typeLine(tab, 'sleep 100');
    await new Promise((resolve) => setTimeout(resolve, 500));
    const interruptedAt = Date.now();
    await page.keyboard.press('Control+C');
    await typeLine(tab, 'echo rc-$?-after-$((1+1))');
    await waitForLine(tab, 'rc-130-after-2', 10_000);
    expect(Date.now() - interruptedAt).toBeLessThan(10_000);

    // A nested interactive bash's exit code reaches the shell; the login shell's own exit code reaches the page.
    await typeLine(tab, 'bash');
    await typeLine(tab, 'echo nested-$((1+2))');
    await waitForLine(tab, 'nested-3');
    await typeLine(tab, 'exit 3');
    await typeLine(tab, 'echo inner-rc-$?');
    await waitForLine(tab, 'inner-rc-3');
    await tab.screenshot('terminal.png');
    await typeLine(tab, 'exit 3');
    await page.waitForSelector('#exit-status[data-exit-code="3"]', { timeout: 10_000 });
    expect(await page.textContent('#exit-status')).toMatch(/3/);

    // The key was not remembered (#remember unticked): it is in no storage of the page.
    const storage = await page.evaluate(() => {
      const { sessionStorage, localStorage } = globalThis as unknown as Record<string, Record<string, string>>;
      return JSON.stringify({ ...sessionStorage, ...localStorage });
    });
    expect(storage).not.toContain(stack.keys.harness);
    expect(tab.problems).toEqual([]);
    await tab.close();
  }, 120_000);

  it('resumes after the relay connections drop, without losing or repeating output', async () => {
    const tab = await openTerminal();
    const { page } = tab;
    await page.waitForFunction(() => tether.terminalText().trim() !== '', undefined, { timeout: 15_000 });
    await page.click('#terminal');
    // The network drops mid-output: every relay socket (the page's and the executor's) is cut and new ones are
    // refused for a second. The page says it is reconnecting, resumes the session, and shows each line of the
    // output exactly once, in order; the shell then takes commands as before.
    const harnessSocketsBefore = tap.upgrades().filter((p) => p.includes('role=harness')).length;
    await typeLine(tab, 'for i in $(seq 1 50); do echo line-$i; sleep 0.05; done; echo loop-$((2*5))-done');
    await waitForLine(tab, 'line-5');
    tap.dropAll({ refuseForMs: 1000 });
    await waitForState(tab, 'reconnecting', 10_000, 10);
    expect(await page.getAttribute('#status', 'data-state')).toBe('reconnecting');
    await waitForState(tab, 'connected', 30_000);
    expect(await page.getAttribute('#status', 'data-state')).toBe('connected');
    expect(tap.upgrades().filter((p) => p.includes('role=harness')).length).toBeGreaterThan(harnessSocketsBefore);
    await waitForLine(tab, 'loop-10-done', 20_000);
    const numbered = (await lines(tab)).filter((l) => /^line-\d+$/.test(l));
    expect(numbered).toEqual(Array.from({ length: 50 }, (_, i) => `line-${i + 1}`));
    secrets.add('line-17');
    secrets.add('loop-10-done');
    await typeLine(tab, 'echo post-$((3+4))');
    await waitForLine(tab, 'post-7');
    // Chromium itself logs each socket the tap refused during the outage; nothing else may be a problem.
    const refused = (p: { kind: string; text: string }) =>
      p.kind === 'console' &&
      p.text.startsWith(`WebSocket connection to '${tap.url}/ws/environment/${ENVIRONMENT}?role=harness&`) &&
      p.text.includes("' failed: ");
    expect(tab.problems.filter((p) => !refused(p))).toEqual([]);
    await tab.close();
  }, 120_000);

  it('runs the command given instead of the login shell (through /bin/sh -c) and shows its exit code', async () => {
    const tab = await openTerminal('echo cmd-$((5*5)) $0; exit 5');
    await waitForLine(tab, 'cmd-25 /bin/sh');
    await tab.page.waitForSelector('#exit-status[data-exit-code="5"]', { timeout: 10_000 });
    expect(tab.problems).toEqual([]);
    await tab.close();
  }, 60_000);

  it('speaks the ChaChaPoly suite to an executor that chose it (WebCrypto has no ChaCha: opened in JavaScript)', async () => {
    // The bundle names the executor's suite; the page follows it.
    const bundle = await fetchBundle(
      { registryUrl: stack.registryUrl, apiKey: stack.keys.harness },
      CHACHA_ENVIRONMENT,
      generateIdentity().publicKey,
    );
    expect(bundle.executorPublicKey.suite).toBe(SUITE_HYBRID_CHACHAPOLY);
    const marker = `chacha-${randomBytes(6).toString('hex')}`;
    secrets.add(marker);
    const tab = await openTerminal(
      `head -c 300000 /dev/zero | tr '\\0' x | fold -w 100; echo; echo ${marker}; exit 7`,
      CHACHA_ENVIRONMENT,
    );
    await waitForLine(tab, marker);
    await tab.page.waitForSelector('#exit-status[data-exit-code="7"]', { timeout: 10_000 });
    expect(tab.problems).toEqual([]);
    await tab.close();
  }, 60_000);

  it('over plain http off localhost, says it needs a secure context, and spends no grant', async () => {
    const { url, grant } = await mintGrant();
    const insecure = new URL(url);
    insecure.hostname = INSECURE_HOST;
    const tab = await browser.newPage({ viewport: { width: 1000, height: 700 } });
    await tab.page.goto(insecure.href);
    await waitForState(tab, 'error', 10_000);
    expect(await tab.page.evaluate<boolean>('isSecureContext')).toBe(false);
    expect(await tab.page.textContent('#status')).toMatch(/needs a secure context.*https:\/\//);
    expect(await tab.page.evaluate<string>('location.hash')).toBe('');
    // Chromium says itself that COOP means nothing on such an origin; nothing else may go wrong.
    const coopIgnored =
      /^The Cross-Origin-Opener-Policy header has been ignored, because the URL's origin was untrustworthy/;
    expect(tab.problems.filter((p) => !(p.kind === 'console' && coopIgnored.test(p.text)))).toEqual([]);
    await tab.close();
    // The grant was not exchanged: it still works once.
    const exchanged = await fetch(`${stack.registryUrl}/cloud/browser-grants/exchange`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ grant }),
    });
    expect(exchanged.status).toBe(200);
  }, 60_000);

  it('signs in with a one-time grant from the registry, which leaves neither the address bar nor storage', async () => {
    const { url, grant } = await mintGrant();
    const tab = await browser.newPage({ viewport: { width: 1000, height: 700 } });
    await tab.page.goto(url);
    await waitForState(tab, 'connected', 20_000);
    expect(await tab.page.evaluate<string>('location.hash')).toBe('');
    const stored = await tab.page.evaluate<string>('JSON.stringify({ ...sessionStorage, ...localStorage })');
    expect(stored).not.toContain(grant);
    await tab.page.click('#terminal');
    await typeLine(tab, 'echo granted-$((3*3))');
    await waitForLine(tab, 'granted-9');
    expect(tab.problems).toEqual([]);
    await tab.close();

    // The link works once.
    const again = await browser.newPage();
    await again.page.goto(url);
    await waitForState(again, 'error', 20_000);
    expect(await again.page.textContent('#status')).toContain('refused');
    await again.close();
  }, 60_000);

  it('uploads and downloads a file with its sha256 checked, and kills a process from the list', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tether-browser-files-'));
    const sdk = await Environment.connectRendezvous({
      registryUrl: stack.registryUrl,
      apiKey: stack.keys.harness,
      environmentId: ENVIRONMENT,
    });
    try {
      // Random bytes around a marker that must never cross the relay in the clear.
      const marker = `file-marker-${randomBytes(12).toString('hex')}`;
      secrets.add(marker);
      const content = Buffer.concat([randomBytes(3 * 1024 * 1024), Buffer.from(marker), randomBytes(1024 * 1024 + 17)]);
      const name = `upload-${randomBytes(4).toString('hex')}.bin`;
      const local = join(dir, name);
      writeFileSync(local, content);
      const remoteDir = mkdtempSync(join(tmpdir(), 'tether-browser-remote-'));
      const tab = await openTerminal();
      const { page } = tab;
      await page.fill('#remote-dir', remoteDir);
      await page.setInputFiles('#upload', local);
      const upload = page.locator('#transfers li[data-direction="upload"]');
      await upload.and(page.locator('[data-state="done"]')).waitFor({ timeout: 30_000 });
      expect(await upload.getAttribute('data-sha256')).toBe(sha256(content));
      // The executor runs on this machine: what it wrote is read back here.
      expect(sha256(readFileSync(join(remoteDir, name)))).toBe(sha256(content));

      await page.fill('#download-path', join(remoteDir, name));
      const [download] = await Promise.all([page.waitForEvent('download'), page.click('#download')]);
      const saved = join(dir, 'downloaded.bin');
      await download.saveAs(saved);
      expect(sha256(readFileSync(saved))).toBe(sha256(content));
      const downloaded = page.locator('#transfers li[data-direction="download"]');
      expect(await downloaded.getAttribute('data-state')).toBe('done');
      expect(await downloaded.getAttribute('data-sha256')).toBe(sha256(content));
      await tab.screenshot('files.png');

      // A detached process shows in the list, and its kill button ends it.
      const { processId } = await sdk.spawnDetached(['sleep', '300']);
      await page.evaluate(() => tether.refreshProcesses());
      const row = page.locator(`#processes tr[data-process-id="${processId}"]`);
      await row.waitFor({ timeout: 10_000 });
      expect(await row.getAttribute('data-state')).toBe('running');
      await row.locator('button.kill').click();
      await expect
        .poll(async () => (await sdk.listProcesses()).find((p) => p.processId === processId)?.state, {
          timeout: 10_000,
        })
        .not.toBe('running');
      expect(tab.problems, diagnostics(tab)).toEqual([]);
      await tab.close();
      rmSync(remoteDir, { recursive: true, force: true });
    } finally {
      await sdk.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);

  it('the relay saw the session only as ciphertext', () => {
    const harnessConnections = new Set(
      tap.upgrades().flatMap((path, i) => (path.includes('role=harness') ? [i + 1] : [])),
    );
    // Five pages and the SDK (the resumed page reconnected once more).
    expect(harnessConnections.size).toBeGreaterThanOrEqual(5);
    const harnessFrames = tap.frames().filter((f) => harnessConnections.has(f.connection));
    expect(harnessFrames.some((f) => f.direction === 'up')).toBe(true);
    expect(harnessFrames.some((f) => f.direction === 'down')).toBe(true);
    expect(tap.bytesSeen()).toBeGreaterThan(10_000);
    for (const text of [...secrets, 'hello-42', 'rc-130', 'post-7', 'nested-3', 'cmd-25', 'stty size', 'sleep 100']) {
      expect(tap.containsBytes(text), text).toBe(false);
    }
    expect(tap.containsBytes(stack.keys.harness)).toBe(false);
    expect(tap.containsBytes(stack.keys.executor)).toBe(false);
  });
});

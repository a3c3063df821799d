/**
 * Share links in a real headless Chromium, through the whole product path (registry bin serving /ui, relay bin
 * behind the test-kit's tap, `executor --registry --record-dir`): an agent (the SDK) starts a terminal detached,
 * follows it and shares it with `harness share`; the printed link opens the page once, which watches the process
 * live with its participants and — for a control link — takes control, while the agent keeps its handle. A
 * read-only link never types; a revoked share stops the page at once; the recording names the page's session as
 * the sender of its keystrokes; nothing typed crosses the relay in the clear.
 *
 * The page's contract here: `#shared[data-access][data-controlling]`, `button#take-control`, `#participants li`,
 * and `window.tether` (state, sharedText, sharedState, participants).
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Environment, type Participant } from '@tether/client';
import {
  findProcesses,
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
import { follow, harnessScript } from './stack-suite.ts';

const ENVIRONMENT = 'browser-share-e2e';
const UI_DIR = join(repoRoot(), 'packages', 'web', 'dist');
const work = mkdtempSync(join(tmpdir(), 'tether-browser-share-'));
const recordDir = join(work, 'recordings');

interface PageHook {
  state(): string;
  sharedText(): string;
  sharedState(): { access: string; controlling: boolean; ended: boolean; rows: number; cols: number } | null;
  participants(): Participant[];
}
declare const tether: PageHook;

let tap: RelayTap;
let stack: Stack;
let browser: TestBrowser;
/** Everything typed and every output marker: none of it may cross the relay in the clear. */
const secrets = new Set<string>();

beforeAll(async () => {
  tap = await startRelayTap();
  stack = await startStack({ relayVia: tap, registryArgs: ['--ui-dir', UI_DIR] });
  await stack.startExecutor('tether', ENVIRONMENT, { args: ['--record-dir', recordDir] });
  browser = await startBrowser();
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await stack?.close();
  await tap?.close();
  expect(findProcesses({ cwdUnder: work })).toEqual([]);
  rmSync(work, { recursive: true, force: true });
});

/** The agent: the SDK through the registry and relay, with the stack's harness key. */
const agentEnvironment = () =>
  Environment.connectRendezvous({
    registryUrl: stack.registryUrl,
    apiKey: stack.keys.harness,
    environmentId: ENVIRONMENT,
    clientName: 'browser-share-agent',
  });

/** A terminal that echoes each line as `got:LINE`, and answers `size` with its rows and columns. */
const ECHO = [
  '/bin/sh',
  '-c',
  'stty -echo; while IFS= read -r line; do if [ "$line" = size ]; then stty size; else echo "got:$line"; fi; done',
];

/** `harness share ARGS` through the built CLI: its token and link. */
async function share(args: string): Promise<{ token: string; link: string }> {
  const outcome = await harnessScript(stack, ENVIRONMENT, work, `h share ${args}`);
  expect(outcome.code, outcome.stderr).toBe(0);
  const [token, link] = outcome.stdout.split('\n') as [string, string];
  secrets.add(token);
  secrets.add(new URLSearchParams(new URL(link).hash.slice(1)).get('grant') as string);
  return { token, link };
}

async function openLink(link: string): Promise<TestPage> {
  const tab = await browser.newPage({ viewport: { width: 900, height: 600 } });
  await tab.page.goto(link);
  return tab;
}

async function waitForState(tab: TestPage, state: string, timeoutMs = 20_000): Promise<void> {
  try {
    await tab.page.waitForFunction((wanted) => tether.state() === wanted, state, { timeout: timeoutMs, polling: 50 });
  } catch (err) {
    const status = await tab.page.textContent('#status');
    throw new Error(`${(err as Error).message}\nstatus: ${status}\nconsole:\n${tab.console.join('\n')}`);
  }
}

async function waitForText(tab: TestPage, text: string, timeoutMs = 15_000): Promise<void> {
  try {
    await tab.page.waitForFunction((wanted) => tether.sharedText().includes(wanted), text, {
      timeout: timeoutMs,
      polling: 50,
    });
  } catch (err) {
    const shown = await tab.page.evaluate(() => tether.sharedText());
    throw new Error(`${(err as Error).message}\nwaiting for ${text}; the page shows:\n${shown}`);
  }
}

const participantsOf = (tab: TestPage) => tab.page.evaluate(() => tether.participants());

describe('a share link in the browser', { timeout: 120_000 }, () => {
  it('an agent’s terminal is watched and taken over from the page while the agent keeps its handle', async () => {
    const agent = await agentEnvironment();
    let tab: TestPage | null = null;
    try {
      const { processId } = await agent.spawnDetached(ECHO, { cwd: work, tty: true, size: { rows: 20, cols: 70 } });
      const seenByAgent: Participant[][] = [];
      const handle = await agent.attach(processId, { onParticipants: (list) => seenByAgent.push(list) });
      const output = follow(handle);
      secrets.add('agent-one');
      await handle.write('agent-one\n');
      await output.until('got:agent-one');

      const { link } = await share(processId);
      tab = await openLink(link);
      await waitForState(tab, 'connected');
      // The fragment (grant, token) is gone from the address bar once read.
      expect(new URL(tab.page.url()).hash).toBe('');
      // The replay, then live: the page sees what the agent did before it came.
      await waitForText(tab, 'got:agent-one');
      expect(await tab.page.getAttribute('#shared', 'data-access')).toBe('control');
      expect(await tab.page.isEnabled('button#take-control')).toBe(true);

      // Participants, on both sides: the agent's key (owner, control) and the page's link session.
      await tab.page.waitForFunction(() => tether.participants().length === 2);
      const onPage = await participantsOf(tab);
      const owner = onPage.find((p) => p.owner);
      const page = onPage.find((p) => p.you);
      expect(owner).toMatchObject({ access: 'control', you: false, sessions: 1 });
      expect(owner?.who).toMatch(/^key_\w+$/);
      expect(page).toMatchObject({ access: 'control', owner: false, sessions: 1 });
      expect(page?.who).toBe(`share link of ${owner?.who}`);
      expect(await tab.page.locator('#participants li').allTextContents()).toEqual(
        expect.arrayContaining([`${owner?.who}: controls, owner`, `${page?.who} (you): controls`]),
      );
      await expect.poll(() => handle.participants.length).toBe(2);
      expect(handle.participants.find((p) => p.you)).toMatchObject({ owner: true, who: owner?.who });
      expect(seenByAgent.length).toBeGreaterThanOrEqual(2);

      // Before "take control", typing on the page reaches nothing (the page says so).
      secrets.add('typed-while-watching');
      await tab.page.click('#shared-terminal');
      await tab.page.keyboard.type('typed-while-watching\n');
      await tab.page.locator('#shared-note', { hasText: 'take control to type' }).waitFor();

      // Take control: the page's keystrokes arrive, and the terminal takes the page's size.
      await tab.page.click('button#take-control');
      expect(await tab.page.getAttribute('#shared', 'data-controlling')).toBe('true');
      secrets.add('from-the-browser');
      await tab.page.click('#shared-terminal');
      await tab.page.keyboard.type('from-the-browser\n');
      await output.until('got:from-the-browser');
      await waitForText(tab, 'got:from-the-browser');
      const size = await tab.page.evaluate(() => tether.sharedState());
      await handle.write('size\n');
      await output.until(`${size?.rows} ${size?.cols}`);
      // The agent's handle goes on working.
      secrets.add('agent-two');
      await handle.write('agent-two\n');
      await waitForText(tab, 'got:agent-two');
      await tab.screenshot('browser-share-control.png');
      expect(output.seen).not.toContain('typed-while-watching');

      // The link worked once: opened again, its grant is spent.
      const again = await openLink(link);
      await waitForState(again, 'error');
      expect(await again.page.textContent('#status')).toMatch(/the sign-in link was refused \(HTTP 401\)/);
      expect(await again.page.evaluate(() => tether.sharedText())).toBe('');
      await again.close();

      // Revoked: the page stops at once; the agent goes on.
      const revoked = await harnessScript(stack, ENVIRONMENT, work, `h share --revoke ${processId}`);
      expect(revoked.code, revoked.stderr).toBe(0);
      await waitForState(tab, 'lost', 10_000);
      expect(await tab.page.textContent('#status')).toMatch(/revoked/);
      expect(await tab.page.isDisabled('button#take-control')).toBe(true);
      await handle.write('agent-three\n');
      await output.until('got:agent-three');
      expect(tab.problems).toEqual([]);

      // The recording names the page's session as the sender of its keystrokes, and verifies.
      await agent.kill(processId, 'kill');
      const name = readdirSync(recordDir).find((file) => file.endsWith(`-${processId}.cast`)) as string;
      await expect
        .poll(() => readFileSync(join(recordDir, name), 'utf8').includes('"tether.exit"'), { timeout: 10_000 })
        .toBe(true);
      const verified = await harnessScript(stack, ENVIRONMENT, work, `h recording verify "$W/recordings/${name}"`);
      expect(verified.code, verified.stderr + verified.stdout).toBe(0);
      const text = readFileSync(join(recordDir, name), 'utf8');
      const events = text
        .trim()
        .split('\n')
        .slice(1)
        .map((line) => JSON.parse(line) as [number, string, string]);
      let from = '';
      const inputs: Array<[string, string]> = [];
      for (const [, type, data] of events) {
        if (type === 'tether.from') from = data;
        if (type === 'i') inputs.push([from, data]);
      }
      const typed = (who: RegExp) =>
        inputs
          .filter(([sender]) => who.test(sender))
          .map(([, data]) => data)
          .join('');
      expect(typed(/^key:harness:[^:]+:link:lnk_[0-9a-f]{24}$/)).toContain('from-the-browser');
      expect(typed(/^key:harness:[^:]+$/)).toContain('agent-one');
      expect(inputs.map(([, data]) => data).join('')).not.toContain('typed-while-watching');
    } finally {
      await tab?.close();
      await agent.close();
    }
  });

  it('a read-only link watches: it cannot take control, and what it types reaches nothing', async () => {
    const agent = await agentEnvironment();
    let tab: TestPage | null = null;
    try {
      const { processId } = await agent.spawnDetached(ECHO, { cwd: work, tty: true });
      const handle = await agent.attach(processId);
      const output = follow(handle);
      const { link } = await share(`--read-only ${processId}`);
      tab = await openLink(link);
      await waitForState(tab, 'connected');
      // 'connected' is the session's state: the shared view shows its access once its attach is answered.
      await tab.page.waitForSelector('#shared[data-access]', { state: 'attached' });
      expect(await tab.page.getAttribute('#shared', 'data-access')).toBe('view');
      expect(await tab.page.isDisabled('button#take-control')).toBe(true);
      expect(await tab.page.textContent('#shared-access')).toBe('read-only');
      await tab.page.waitForFunction(() => tether.participants().some((p) => p.you && p.access === 'view'));

      secrets.add('viewer-typed');
      await tab.page.click('#shared-terminal');
      await tab.page.keyboard.type('viewer-typed\n');
      await tab.page.locator('#shared-note', { hasText: 'read-only' }).waitFor();
      // Even clicked, the disabled button gives no control.
      await tab.page.click('button#take-control', { force: true });
      expect(await tab.page.getAttribute('#shared', 'data-controlling')).toBe('false');
      secrets.add('owner-typed');
      await handle.write('owner-typed\n');
      await waitForText(tab, 'got:owner-typed');
      await output.until('got:owner-typed');
      expect(output.seen).not.toContain('viewer-typed');
      expect(tab.problems).toEqual([]);
      await agent.kill(processId, 'kill');
    } finally {
      await tab?.close();
      await agent.close();
    }
  });

  it('nothing typed on either side, no token and no grant crossed the relay in the clear', () => {
    expect(tap.upgrades().length).toBeGreaterThan(0);
    for (const text of [...secrets, 'got:from-the-browser', stack.keys.harness]) {
      expect(tap.containsBytes(text), text).toBe(false);
    }
  });
});

/**
 * Shared processes (capability `processShare`) through the real registry, relay and `executor --registry`: the
 * key that started a detached process shares it with another key by a token, for `view` (output only) or
 * `control`; both follow the same terminal at once; only a controller's keystrokes arrive (and the recording
 * names who sent them); a revoked share stops the other side at once; without a token the process does not exist
 * for another key.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Environment } from '@tether/client';
import { findProcesses, type Stack, startPeer, startStack } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { follow, harnessScript } from './stack-suite.ts';

const ENVIRONMENT = 'shared-e2e';
const work = mkdtempSync(join(tmpdir(), 'tether-shared-'));
const recordDir = join(work, 'recordings');
let stack: Stack;
let otherKey: string;
let viewKey: string;

const connect = (apiKey: string) =>
  Environment.connectRendezvous({
    registryUrl: stack.registryUrl,
    apiKey,
    environmentId: ENVIRONMENT,
    clientName: 'shared-e2e',
  });

beforeAll(async () => {
  stack = await startStack();
  await stack.startExecutor('tether', ENVIRONMENT, { args: ['--record-dir', recordDir] });
  otherKey = await stack.createKey('harness', '*');
  viewKey = await stack.createKey('harness', '*', { access: 'view' });
}, 120_000);

afterAll(async () => {
  await stack?.close();
  expect(findProcesses({ cwdUnder: work })).toEqual([]);
  rmSync(work, { recursive: true, force: true });
});

describe('sharing a detached terminal with another key', { timeout: 60_000 }, () => {
  it('view: both see the same output, only the owner’s keystrokes arrive; revoked, the viewer stops at once', async () => {
    const owner = await connect(stack.keys.harness);
    const other = await connect(otherKey);
    try {
      const { processId } = await owner.spawnDetached(['/bin/sh', '-c', 'while read line; do echo "got:$line"; done'], {
        cwd: work,
        tty: true,
      });
      // Another key does not see it, nor reach it, without a token.
      expect((await other.listProcesses()).map((entry) => entry.processId)).not.toContain(processId);
      await expect(other.attach(processId)).rejects.toThrow(`unknown process id ${processId}`);

      const share = await owner.share(processId, { access: 'view', ttlSec: 600 });
      expect(share.token).toMatch(/^tsh_[A-Za-z0-9_-]{43}$/);
      const mine = await owner.attach(processId);
      const viewer = await other.attach(processId, { shareToken: share.token });
      const ownerView = follow(mine);
      const otherView = follow(viewer);

      await mine.write('from-owner\n');
      await Promise.all([ownerView.until('got:from-owner'), otherView.until('got:from-owner')]);
      // A viewer's keystrokes reach nothing: to it the process takes no input.
      expect(await viewer.write('from-viewer\n')).toBe('unknownProcess');
      await mine.write('second\n');
      await otherView.until('got:second');
      expect(otherView.seen).not.toContain('from-viewer');

      // The owner lists the share, with the viewer following by it.
      const listed = (await owner.listProcesses()).find((entry) => entry.processId === processId);
      expect(listed?.shares).toEqual([
        { shareId: share.shareId, access: 'view', expiresAtMs: share.expiresAtMs, attached: 1 },
      ]);

      expect(await owner.unshare(processId, share.shareId)).toBe(1);
      await expect(viewer.completion).rejects.toThrow(`access to process ${processId} was revoked by its owner`);
      await expect(otherView.done).rejects.toThrow('was revoked');
      await expect(other.attach(processId, { shareToken: share.token })).rejects.toThrow(
        `unknown process id ${processId}`,
      );
      await owner.kill(processId);
      await ownerView.done;
    } finally {
      await owner.close();
      await other.close();
    }
  });

  it('control: the other key types too, and the recording names who sent each keystroke', async () => {
    const owner = await connect(stack.keys.harness);
    const other = await connect(otherKey);
    try {
      const { processId } = await owner.spawnDetached(['/bin/sh', '-c', 'while read line; do echo "got:$line"; done'], {
        cwd: work,
        tty: true,
        processId: 'shared-control',
      });
      const { token } = await owner.share(processId, { access: 'control' });
      const controller = await other.attach(processId, { shareToken: token });
      const seen = follow(controller);
      await controller.write('from-other\n');
      await seen.until('got:from-other');
      const mine = await owner.attach(processId);
      const ownerSeen = follow(mine);
      await mine.write('from-owner\n');
      await seen.until('got:from-owner');
      // A controller may end it, too.
      await controller.signal('kill');
      await Promise.all([seen.done, ownerSeen.done]);
    } finally {
      await owner.close();
      await other.close();
    }
    // Two senders, by their keys' ids (the recording is sealed once the process has closed).
    let cast = '';
    for (let attempt = 0; attempt < 100 && !/"tether\.exit".*\n.*tether\.seal/s.test(cast); attempt++) {
      const name = readdirSync(recordDir).find((file) => file.endsWith('-shared-control.cast'));
      cast = name ? readFileSync(join(recordDir, name), 'utf8') : '';
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const senders = cast
      .split('\n')
      .filter((line) => line.includes('"tether.from"'))
      .map((line) => JSON.parse(line)[2]);
    expect(new Set(senders).size).toBe(2);
    for (const sender of senders) expect(sender).toMatch(/^key:harness:/);
  });
});

describe('harness share, attach --token, ps', { timeout: 60_000 }, () => {
  it('the owner shares read-only by a token; the other key follows with it; ps lists the share; revoked, it is refused', async () => {
    const sh = (script: string, env: Record<string, string> = {}) =>
      harnessScript(stack, ENVIRONMENT, work, script, { TETHER_HARNESS_SHARE_TOKEN: '', ...env });
    const started = await sh(
      `h exec -d --cwd "$W" -- sh -c 'i=0; while [ $i -lt 600 ]; do echo "tick $i"; i=$((i+1)); sleep 0.1; done'`,
    );
    expect(started.code, started.stderr).toBe(0);
    const id = started.stdout.trim();
    const shared = await sh(`h share --read-only --ttl 10m ${id}`);
    expect(shared.code, shared.stderr).toBe(0);
    // Line 1 the token, line 2 the browser link: a one-time view grant, with the process and token in the fragment.
    const [token = '', linkText = '', rest] = shared.stdout.split('\n');
    expect(token).toMatch(/^tsh_/);
    expect(rest).toBe('');
    const link = new URL(linkText);
    expect(`${link.origin}${link.pathname}`).toBe(`${stack.registryUrl}/ui/`);
    const fragment = new URLSearchParams(link.hash.slice(1));
    expect([fragment.get('env'), fragment.get('process'), fragment.get('share')]).toEqual([ENVIRONMENT, id, token]);
    expect(fragment.get('grant')).toMatch(/^tbgr_/);
    expect(shared.stderr).toMatch(
      new RegExp(
        `^harness: share \\w+ of ${id} \\(read-only\\) until \\S+Z: harness attach --token TOKEN ${id}; the link opens the browser page once, until \\d\\d:\\d\\d\\n$`,
      ),
    );
    // The link's grant is a view link's: its session is named apart from the key, and is a view.
    const exchanged = await fetch(`${stack.registryUrl}/cloud/browser-grants/exchange`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ grant: fragment.get('grant') }),
    });
    expect(((await exchanged.json()) as { share_access?: string }).share_access).toBe('view');
    // An admin key may share any process, but the registry mints browser grants for harness keys only: the token
    // alone, and stderr says why.
    const adminKey = await stack.createKey('admin', '*');
    const byAdmin = await sh(`h share ${id}`, { TETHER_HARNESS_API_KEY: adminKey });
    expect(byAdmin.code, byAdmin.stderr).toBe(0);
    expect(byAdmin.stdout).toMatch(/^tsh_[A-Za-z0-9_-]{43}\n$/);
    expect(byAdmin.stderr).toMatch(/; no browser link: the registry refused the harness API key .*HTTP 403.*\n$/);
    // --no-link: the token alone.
    const tokenOnly = await sh(`h share --no-link ${id}`);
    expect(tokenOnly.stdout).toMatch(/^tsh_[A-Za-z0-9_-]{43}\n$/);

    // The other key: nothing without the token; with it (from the variable), the output, until | head has enough.
    const other = { TETHER_HARNESS_API_KEY: otherKey };
    expect((await sh(`h attach ${id}`, other)).stderr).toBe(
      `harness: unknown process id ${id} in environment ${ENVIRONMENT}\n`,
    );
    const followed = await sh(`h attach ${id} | grep -m1 tick`, { ...other, TETHER_HARNESS_SHARE_TOKEN: token });
    expect(followed.stdout).toMatch(/^tick \d+\n$/);
    expect(followed.code).toBe(0);

    const ps = await sh('h ps');
    expect(ps.stdout.split('\n')[0]).toMatch(/^ID\s+STATE\s+PID\s+STARTED\s+SHARES\s+COMMAND$/);
    expect(ps.stdout).toMatch(new RegExp(`${id}\\s+running\\s+\\d+\\s+\\S+ \\S+\\s+\\w+:view\\(\\d,10m\\)`));

    expect(await sh(`h share --revoke ${id}`)).toMatchObject({
      code: 0,
      stderr: `harness: 3 shares of ${id} revoked\n`,
    });
    expect((await sh(`h attach ${id}`, { ...other, TETHER_HARNESS_SHARE_TOKEN: token })).code).toBe(1);
    expect((await sh(`h kill -s KILL ${id}`)).code).toBe(0);
  });
});

describe('harness share straight to an executor (--url)', { timeout: 60_000 }, () => {
  it('prints the token alone and says why there is no browser link', async () => {
    const peer = await startPeer({ kind: 'tether', transport: 'ws' });
    try {
      const sh = (script: string) => harnessScript(stack, ENVIRONMENT, work, script, { URL: peer.url as string });
      const started = await sh('h exec --url "$URL" -d -- sleep 30');
      expect(started.code, started.stderr).toBe(0);
      const id = started.stdout.trim();
      const shared = await sh(`h share --url "$URL" ${id}`);
      expect(shared.code, shared.stderr).toBe(0);
      expect(shared.stdout).toMatch(/^tsh_[A-Za-z0-9_-]{43}\n$/);
      expect(shared.stderr).toMatch(
        /; no browser link: the executor is reached directly \(--url\), not through a registry\n$/,
      );
      expect((await sh(`h kill --url "$URL" -s KILL ${id}`)).code).toBe(0);
    } finally {
      await peer.close();
    }
  });
});

describe('a view-only harness key (registry keys create --access view)', { timeout: 60_000 }, () => {
  it('starts nothing and writes no file; by a share it follows a process, but even a control share lets it type nothing', async () => {
    const owner = await connect(stack.keys.harness);
    const viewer = await connect(viewKey);
    try {
      await expect(viewer.exec(['true'])).rejects.toThrow(
        'this API key is view-only: process/start is refused (it may list processes and follow those shared with it)',
      );
      await expect(viewer.fs.writeFile(join(work, 'x'), Buffer.from('x'))).rejects.toThrow('this API key is view-only');
      const { processId } = await owner.spawnDetached(['/bin/sh', '-c', 'while read line; do echo "got:$line"; done'], {
        cwd: work,
        tty: true,
      });
      const { token } = await owner.share(processId, { access: 'control' });
      const attached = await viewer.attach(processId, { shareToken: token });
      expect(attached.info?.access).toBe('view');
      const seen = follow(attached);
      const mine = await owner.attach(processId);
      const ownerSeen = follow(mine);
      await expect(attached.write('from-view-key\n')).rejects.toThrow(
        'this API key is view-only: process/write is refused',
      );
      await mine.write('from-owner\n');
      await seen.until('got:from-owner');
      expect(seen.seen).not.toContain('from-view-key');
      await owner.kill(processId, 'kill');
      await Promise.all([seen.done, ownerSeen.done]);
    } finally {
      await owner.close();
      await viewer.close();
    }
  });
});

describe('a share link’s session (the grant harness share mints), driven by the SDK as the page drives it', {
  timeout: 60_000,
}, () => {
  /** A session token of a share link's grant, minted with `apiKey` for `access`. */
  async function linkSession(apiKey: string, access: 'view' | 'control'): Promise<string> {
    const minted = await fetch(`${stack.registryUrl}/cloud/browser-grants`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ environment_id: ENVIRONMENT, share_access: access }),
    });
    const { grant } = (await minted.json()) as { grant: string };
    const exchanged = await fetch(`${stack.registryUrl}/cloud/browser-grants/exchange`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ grant }),
    });
    return ((await exchanged.json()) as { token: string }).token;
  }

  it('reaches nothing of its own key but the shared process: no start, no file, no other process, no share on', async () => {
    const owner = await connect(stack.keys.harness);
    const control = await connect(await linkSession(stack.keys.harness, 'control'));
    const view = await connect(await linkSession(stack.keys.harness, 'view'));
    try {
      const { processId } = await owner.spawnDetached(['/bin/sh', '-c', 'while read line; do echo "got:$line"; done'], {
        cwd: work,
        tty: true,
      });
      const other = await owner.spawnDetached(['sleep', '30'], { cwd: work });
      await expect(control.exec(['true'])).rejects.toThrow(
        "this is a share link's session: process/start is refused (it may follow and control only the process shared with it)",
      );
      await expect(control.fs.readFile(join(work, 'x'))).rejects.toThrow("this is a share link's session: fs/");
      await expect(view.exec(['true'])).rejects.toThrow('this is a read-only share link: process/start is refused');
      // The key's own processes are not its own: listed and reached only by a token.
      expect(await control.listProcesses()).toEqual([]);
      await expect(control.attach(other.processId)).rejects.toThrow(`unknown process id ${other.processId}`);
      const { token } = await owner.share(processId, { access: 'control' });
      const attached = await control.attach(processId, { shareToken: token });
      expect(attached.info?.access).toBe('control');
      expect((await control.listProcesses()).map((p) => p.processId)).toEqual([processId]);
      await expect(control.share(processId)).rejects.toThrow(
        "this is a share link's session: process/share is refused",
      );
      const seen = follow(attached);
      expect(await attached.write('from-the-link\n')).toBe('accepted');
      await seen.until('got:from-the-link');
      // A view link with the same control token only watches.
      const watching = await view.attach(processId, { shareToken: token });
      expect(watching.info?.access).toBe('view');
      await expect(watching.write('from-the-view-link\n')).rejects.toThrow(
        'this is a read-only share link: process/write is refused',
      );
      await owner.kill(processId, 'kill');
      await owner.kill(other.processId, 'kill');
      await seen.done;
    } finally {
      await owner.close();
      await control.close();
      await view.close();
    }
  });
});

// fs/watchMissing and fs/missingChanged against both executors (every peer × transport), as Codex 0.171.0
// answers them (CODEX-FINDINGS.md §18).
import { mkdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileUri, type TestClient } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';
import { CASES, REMOTE_CASES, useHarness } from './support.ts';

const CHANGED = 'fs/missingChanged';
/** Long enough for an inotify event to arrive (both peers answer within ~10 ms). */
const QUIET_MS = 400;

const watchMissing = (client: TestClient, watchId: number, missing: string[], present?: string) =>
  client.call<{ watching: boolean }>('fs/watchMissing', {
    watchId,
    missing: missing.map(fileUri),
    ...(present === undefined ? {} : { present: fileUri(present) }),
  });

/** The watch ids of every fs/missingChanged received so far. */
const fired = (client: TestClient) =>
  client.notifications.filter((n) => n.method === CHANGED).map((n) => (n.params as { watchId: number }).watchId);

const firedFor = (client: TestClient, watchId: number) =>
  client.nextNotification((n) => n.method === CHANGED && (n.params as { watchId?: number }).watchId === watchId, 5000);

const quiet = () => new Promise((resolve) => setTimeout(resolve, QUIET_MS));

describe.each(CASES)('fs/watchMissing: %s', (label, { kind, transport }) => {
  const h = useHarness();
  let counter = 0;
  const scratch = () => {
    const dir = join(h.workDir, `watch-${label.replace(/ /g, '-')}-${++counter}`);
    mkdirSync(dir, { recursive: true });
    return dir;
  };

  it('is advertised (fsWatchMissing)', async () => {
    const { initializeResult } = await h.session(kind, transport);
    const info = initializeResult.environmentInfo as { capabilities: Record<string, unknown> };
    expect(info.capabilities.fsWatchMissing).toBe(true);
  });

  it('fires once when a missing file or directory appears, and not again when it goes', async () => {
    const dir = scratch();
    const { client } = await h.session(kind, transport);
    expect(await watchMissing(client, 1, [join(dir, 'a.txt')])).toEqual({ watching: true });
    await quiet();
    expect(fired(client)).toEqual([]);
    writeFileSync(join(dir, 'a.txt'), 'x');
    expect((await firedFor(client, 1)).params).toEqual({ watchId: 1 });
    rmSync(join(dir, 'a.txt'));
    await quiet();
    expect(fired(client)).toEqual([1]);
    expect(await watchMissing(client, 2, [join(dir, 'b')])).toEqual({ watching: true });
    mkdirSync(join(dir, 'b'));
    await firedFor(client, 2);
  });

  it('fires when the first missing component of a deep path appears, for a dangling link, and when present goes', async () => {
    const dir = scratch();
    const { client } = await h.session(kind, transport);
    expect(await watchMissing(client, 1, [join(dir, 'c', 'd', 'e')])).toEqual({ watching: true });
    mkdirSync(join(dir, 'c'));
    await firedFor(client, 1);
    expect(await watchMissing(client, 2, [join(dir, 'link')])).toEqual({ watching: true });
    symlinkSync(join(dir, 'nowhere'), join(dir, 'link'));
    await firedFor(client, 2);
    writeFileSync(join(dir, 'here'), 'x');
    expect(await watchMissing(client, 3, [join(dir, 'never')], join(dir, 'here'))).toEqual({ watching: true });
    rmSync(join(dir, 'here'));
    await firedFor(client, 3);
  });

  it('answers watching: false when there is nothing to wait for', async () => {
    const dir = scratch();
    writeFileSync(join(dir, 'exists'), 'x');
    const { client } = await h.session(kind, transport);
    expect(await watchMissing(client, 1, [join(dir, 'exists')])).toEqual({ watching: false });
    expect(await watchMissing(client, 2, [join(dir, 'exists'), join(dir, 'm1')])).toEqual({ watching: false });
    expect(await watchMissing(client, 3, [])).toEqual({ watching: false });
    expect(await watchMissing(client, 4, [join(dir, 'm2')], join(dir, 'absent'))).toEqual({ watching: false });
    writeFileSync(join(dir, 'm1'), 'x');
    writeFileSync(join(dir, 'm2'), 'x');
    await quiet();
    expect(fired(client)).toEqual([]);
  });

  it('keeps one watch: a higher id replaces it (even one answered false), a lower or equal id changes nothing', async () => {
    const dir = scratch();
    const { client } = await h.session(kind, transport);
    expect(await watchMissing(client, 70, [join(dir, 'A')])).toEqual({ watching: true });
    expect(await watchMissing(client, 71, [join(dir, 'B')])).toEqual({ watching: true });
    writeFileSync(join(dir, 'A'), 'x');
    await quiet();
    expect(fired(client)).toEqual([]);
    writeFileSync(join(dir, 'B'), 'x');
    await firedFor(client, 71);
    expect(await watchMissing(client, 80, [join(dir, 'C')])).toEqual({ watching: true });
    expect(await watchMissing(client, 75, [join(dir, 'D')])).toEqual({ watching: false });
    expect(await watchMissing(client, 80, [join(dir, 'D')])).toEqual({ watching: false });
    writeFileSync(join(dir, 'D'), 'x');
    await quiet();
    expect(fired(client)).toEqual([71]);
    writeFileSync(join(dir, 'C'), 'x');
    await firedFor(client, 80);
    expect(await watchMissing(client, 90, [join(dir, 'F')])).toEqual({ watching: true });
    expect(await watchMissing(client, 91, [])).toEqual({ watching: false }); // cancels 90
    writeFileSync(join(dir, 'F'), 'x');
    await quiet();
    expect(fired(client)).toEqual([71, 80]);
  });

  it('refuses bad parameters with -32602, and a refused call takes no id', async () => {
    const dir = scratch();
    const { client } = await h.session(kind, transport);
    const error = async (params: unknown) => (await client.request('fs/watchMissing', params)).error;
    expect(await error({ watchId: 1, missing: ['rel/path'] })).toEqual({
      code: -32602,
      message: 'invalid URI: relative URL without a base',
    });
    expect(await error({ watchId: 1, missing: ['http://x/y'] })).toEqual({
      code: -32602,
      message: 'unsupported path URI scheme `http`',
    });
    expect((await error({ watchId: 1 }))?.code).toBe(-32602);
    expect((await error({ watchId: 'w1', missing: [] }))?.code).toBe(-32602);
    expect((await error({ watchId: -1, missing: [] }))?.code).toBe(-32602);
    // Id 1 is still free.
    expect(await watchMissing(client, 1, [join(dir, 'G')])).toEqual({ watching: true });
    writeFileSync(join(dir, 'G'), 'x');
    await firedFor(client, 1);
  });
});

// Through the registry and relay (Noise IK), the notification reaches the client like any other.
describe.each(REMOTE_CASES)('fs/watchMissing: %s', (label, { kind, transport }) => {
  const h = useHarness();

  it('fires when the missing file appears', async () => {
    const dir = join(h.workDir, `watch-${label.replace(/ /g, '-')}`);
    mkdirSync(dir, { recursive: true });
    const { client, initializeResult } = await h.session(kind, transport);
    expect((initializeResult.environmentInfo as { capabilities: Record<string, unknown> }).capabilities).toMatchObject({
      fsWatchMissing: true,
      environmentConfigRead: true,
    });
    expect(await watchMissing(client, 1, [join(dir, 'a.txt')])).toEqual({ watching: true });
    writeFileSync(join(dir, 'a.txt'), 'x');
    expect((await firedFor(client, 1)).params).toEqual({ watchId: 1 });
  });
});

import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, expect, it } from 'vitest';
import { startCheckpointer } from './checkpointer.js';
import { openSqliteStore } from './sqlite.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});
const tempDb = () => {
  const dir = mkdtempSync(join(tmpdir(), 'registry-ckpt-'));
  dirs.push(dir);
  return join(dir, 'r.db');
};

it('copies the WAL into the database file from its worker, at the latest when stopped', async () => {
  const path = tempDb();
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('wal_autocheckpoint = 0');
  db.exec('CREATE TABLE t (v TEXT)');
  const insert = db.prepare('INSERT INTO t (v) VALUES (?)');
  for (let i = 0; i < 200; i++) insert.run('x'.repeat(1000));
  const before = statSync(path).size;
  let gone = false;
  const checkpointer = startCheckpointer(path, 60_000, { onReady: () => {}, onGone: () => (gone = true) });
  await checkpointer.stop();
  expect(before).toBeLessThan(50_000);
  expect(statSync(path).size).toBeGreaterThan(200_000);
  expect(gone).toBe(false);
  db.close();
});

it('reports a worker that cannot open the database as gone', async () => {
  const path = join(tempDb(), 'missing-dir', 'r.db');
  let gone: () => void = () => {};
  const wentAway = new Promise<void>((resolve) => {
    gone = resolve;
  });
  startCheckpointer(path, 60_000, { onReady: () => {}, onGone: () => gone() });
  await wentAway;
});

it('a store with background checkpoints works and closes cleanly', async () => {
  const path = tempDb();
  const store = openSqliteStore(path, { backgroundCheckpointMs: 50 });
  await store.createAuthorization({
    tokenHash: 't1',
    environmentId: 'dev-1',
    registrationId: 'reg-1',
    harnessPublicKey: '{}',
    expiresAt: 10_000,
  });
  await store.close();
  const again = openSqliteStore(path);
  expect(
    await again.consumeAuthorization({
      tokenHash: 't1',
      environmentId: 'dev-1',
      registrationId: 'reg-1',
      harnessPublicKey: '{}',
      now: 5_000,
    }),
  ).toEqual({
    connectRequestId: null,
    mintedByKeyId: null,
    mintedByRole: null,
    mintedByAccess: null,
    linkSession: null,
  });
  await again.close();
});

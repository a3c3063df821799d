/**
 * The test-kit's relay tap in front of the real relay bin: the registry hands out the tap's URL, so the executor
 * and `harness exec` both reach the relay through it with their signed URLs unchanged; the tap sees every frame,
 * and neither the command, its output nor the API key crosses it in the clear. (The tap's own tests show it
 * finds plain text that does cross it.)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type RelayTap, repoRoot, type Stack, startRelayTap, startStack } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { runWithTarget } from './harness-checks.js';

const ENVIRONMENT = 'relay-tap-e2e';
const work = mkdtempSync(join(tmpdir(), 'tether-relay-tap-'));
let tap: RelayTap;
let stack: Stack;

/** The workspace's harness CLI, with the variables naming the stack and ENVIRONMENT. */
const harness = (args: string[]) =>
  runWithTarget(process.execPath, [join(repoRoot(), 'apps', 'harness', 'dist', 'main.js'), ...args], {
    stack,
    environmentId: ENVIRONMENT,
    work,
  });

beforeAll(async () => {
  tap = await startRelayTap();
  stack = await startStack({ relayVia: tap });
  await stack.startExecutor('tether', ENVIRONMENT);
}, 60_000);

afterAll(async () => {
  await stack?.close();
  await tap?.close();
  rmSync(work, { recursive: true, force: true });
});

describe('relay tap', () => {
  it('carries the executor and the harness to the relay, and sees only ciphertext', async () => {
    expect(stack.relayPublicUrl).toBe(tap.url);
    expect(stack.relayUrl).not.toBe(tap.url);
    const run = await harness(['exec', '--', 'sh', '-c', 'echo tap-$((6*7))-out']);
    expect(run, run.stderr).toMatchObject({ code: 0, stdout: 'tap-42-out\n' });

    const roles = tap.upgrades().map((path) => new URL(path, 'ws://x').searchParams.get('role'));
    expect(roles).toContain('environment');
    expect(roles).toContain('harness');
    expect(tap.upgrades().every((path) => path.startsWith(`/ws/environment/${ENVIRONMENT}?`))).toBe(true);
    const directions = new Set(tap.frames().map((f) => f.direction));
    expect(directions).toEqual(new Set(['up', 'down']));
    expect(tap.bytesSeen()).toBeGreaterThan(1000);

    expect(tap.containsBytes('tap-42-out')).toBe(false);
    expect(tap.containsBytes('tap-$((6*7))-out')).toBe(false);
    expect(tap.containsBytes(stack.keys.harness)).toBe(false);
    expect(tap.containsBytes(stack.keys.executor)).toBe(false);
    expect(tap.containsBytes('sh -c')).toBe(false);
  }, 60_000);

  it('passes the relay’s refusal of a forged URL through', async () => {
    const path = tap.upgrades().find((p) => p.includes('role=harness')) as string;
    const forged = new URL(path, tap.url);
    forged.searchParams.set('sig', Buffer.alloc(64, 7).toString('base64url'));
    const socket = new WebSocket(forged);
    socket.on('error', () => undefined);
    const status = await new Promise<number | undefined>((resolve) => {
      socket.once('unexpected-response', (_req, res) => resolve(res.statusCode));
      socket.once('open', () => resolve(undefined));
    });
    socket.terminate();
    expect(status).toBe(401);
  });
});

/**
 * Our harness SDK and CLI driving an unmodified `codex exec-server --remote` through our registry and relay
 * bins: a bundle from `/connect`, the relay, the hybrid Noise handshake, then processes and files.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Environment } from '@tether/client';
import { type Stack, startStack } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ENVIRONMENT = 'env-sdk-codex';

describe('harness SDK → registry → relay → codex exec-server --remote', () => {
  let stack: Stack;
  let dir: string;
  let env: Environment;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tether-sdk-codex-'));
    stack = await startStack();
    await stack.startExecutor('codex', ENVIRONMENT);
    env = await Environment.connectRendezvous({
      registryUrl: stack.registryUrl,
      apiKey: stack.keys.harness,
      environmentId: ENVIRONMENT,
      clientName: 'tether-e2e',
    });
  });

  afterAll(async () => {
    await env?.close();
    await stack?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('runs a process and collects its output and exit code', async () => {
    const result = await env.exec(['/bin/sh', '-c', 'printf codex-out; printf codex-err >&2; exit 6'], { cwd: dir });
    expect(result).toMatchObject({ exitCode: 6 });
    expect(result.stdout.toString()).toBe('codex-out');
    expect(result.stderr.toString()).toBe('codex-err');
  });

  it('streams a file up and down through codex fs/open + writeBlock / readBlock', async () => {
    const data = randomBytes(3 * 1024 * 1024 + 5);
    const { pipeline } = await import('node:stream/promises');
    const { Readable } = await import('node:stream');
    await pipeline(Readable.from([data]), env.fs.createWriteStream(join(dir, 'up.bin')));
    expect(readFileSync(join(dir, 'up.bin')).equals(data)).toBe(true);
    writeFileSync(join(dir, 'down.bin'), data);
    const parts: Buffer[] = [];
    for await (const chunk of env.fs.createReadStream(join(dir, 'down.bin'))) parts.push(chunk as Buffer);
    expect(Buffer.concat(parts).equals(data)).toBe(true);
  });

  it('a harness key the registry does not know is refused', async () => {
    await expect(
      Environment.connectRendezvous({
        registryUrl: stack.registryUrl,
        apiKey: 'not-a-key',
        environmentId: ENVIRONMENT,
      }),
    ).rejects.toMatchObject({ code: 'unauthorized' });
  });

  it('an executor API key cannot fetch a harness bundle', async () => {
    await expect(
      Environment.connectRendezvous({
        registryUrl: stack.registryUrl,
        apiKey: stack.keys.executor,
        environmentId: ENVIRONMENT,
      }),
    ).rejects.toMatchObject({ code: 'unauthorized' });
  });

  it('an environment with no executor is reported as not found', async () => {
    await expect(
      Environment.connectRendezvous({
        registryUrl: stack.registryUrl,
        apiKey: stack.keys.harness,
        environmentId: 'env-nobody',
      }),
    ).rejects.toMatchObject({ code: 'not_found' });
  });
});

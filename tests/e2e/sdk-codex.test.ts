/**
 * Our harness SDK and CLI driving an unmodified `codex exec-server --remote` through our registry and relay
 * bins: a bundle from `/connect`, the relay, the hybrid Noise handshake, then processes and files.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Environment } from '@tether/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useExecutorStack } from './stack-suite.ts';

const ENVIRONMENT = 'env-sdk-codex';

describe('harness SDK → registry → relay → codex exec-server --remote', () => {
  const suite = useExecutorStack(ENVIRONMENT, { kind: 'codex', dirPrefix: 'tether-sdk-codex-' });
  let env: Environment;

  beforeAll(async () => {
    env = await Environment.connectRendezvous({
      registryUrl: suite.stack.registryUrl,
      apiKey: suite.stack.keys.harness,
      environmentId: ENVIRONMENT,
      clientName: 'tether-e2e',
    });
  });

  afterAll(async () => {
    await env?.close();
  });

  it('runs a process and collects its output and exit code', async () => {
    const result = await env.exec(['/bin/sh', '-c', 'printf codex-out; printf codex-err >&2; exit 6'], {
      cwd: suite.dir,
    });
    expect(result).toMatchObject({ exitCode: 6 });
    expect(result.stdout.toString()).toBe('codex-out');
    expect(result.stderr.toString()).toBe('codex-err');
  });

  it('streams a file up and down through codex fs/open + writeBlock / readBlock', async () => {
    const data = randomBytes(3 * 1024 * 1024 + 5);
    const { pipeline } = await import('node:stream/promises');
    const { Readable } = await import('node:stream');
    await pipeline(Readable.from([data]), env.fs.createWriteStream(join(suite.dir, 'up.bin')));
    expect(readFileSync(join(suite.dir, 'up.bin')).equals(data)).toBe(true);
    writeFileSync(join(suite.dir, 'down.bin'), data);
    const parts: Buffer[] = [];
    for await (const chunk of env.fs.createReadStream(join(suite.dir, 'down.bin'))) parts.push(chunk as Buffer);
    expect(Buffer.concat(parts).equals(data)).toBe(true);
  });

  it.each([
    ['a harness key the registry does not know is refused', () => 'not-a-key', ENVIRONMENT, 'unauthorized'],
    ['an executor API key cannot fetch a harness bundle', () => suite.stack.keys.executor, ENVIRONMENT, 'unauthorized'],
    [
      'an environment with no executor is reported as not found',
      () => suite.stack.keys.harness,
      'env-nobody',
      'not_found',
    ],
  ])('%s', async (_name, apiKey, environmentId, code) => {
    await expect(
      Environment.connectRendezvous({ registryUrl: suite.stack.registryUrl, apiKey: apiKey(), environmentId }),
    ).rejects.toMatchObject({ code });
  });
});

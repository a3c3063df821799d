/**
 * The harness bin's shape: dist/main.js is a small starter that loads the native packages and runs the one
 * CommonJS bundle it names (dist/cli-HASH.cjs) through a V8 code cache written after a command ran, so that
 * what a command compiles is cached as a whole (apps/harness/src/bundle-runner.ts). The starter holds none of
 * the CLI; the bundle holds all of it (commander, the relay frame codec, the Noise handshake) and not
 * protobuf-es's reflection runtime, whose descriptor registry boots when loaded (the frame codec reads and
 * writes the message with the wire reader and writer alone: relay-frames message.ts).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';

const dist = join(repoRoot(), 'apps', 'harness', 'dist');

/** The bundle main.js runs, and its text. */
function bundle(): { name: string; text: string } {
  const named = /"(cli-[A-Z0-9]+\.cjs)"/.exec(readFileSync(join(dist, 'main.js'), 'utf8'));
  expect(named, 'main.js names its bundle').not.toBeNull();
  const name = named![1] as string;
  expect(existsSync(join(dist, name)), `${name} is built`).toBe(true);
  return { name, text: readFileSync(join(dist, name), 'utf8') };
}

describe('the harness bundle', () => {
  it('main.js is a starter that names one bundle, and holds none of the CLI', () => {
    const main = readFileSync(join(dist, 'main.js'), 'utf8');
    expect(bundle().name).toMatch(/^cli-/);
    for (const marker of ['CommanderError', 'function readRelayMessage', 'HandshakeState']) {
      expect(main).not.toContain(marker);
    }
  });

  it('the bundle holds the whole CLI, and not the protobuf reflection runtime', () => {
    const { text } = bundle();
    for (const marker of ['CommanderError', 'function readRelayMessage', 'HandshakeState'])
      expect(text).toContain(marker);
    expect(text).not.toContain('bootFieldDescriptorProto');
  });
});

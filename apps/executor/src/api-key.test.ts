import { execFileSync } from 'node:child_process';
import { closeSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { loadNativePipe } from '@tether/native-pipe';
import { scratch } from '@tether/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import {
  ApiKeyError,
  chooseApiKeySource,
  MAX_API_KEY_BYTES,
  readApiKey,
  readApiKeyFd,
  readApiKeyFile,
} from './api-key.js';

const test = scratch();
afterEach(() => test.cleanup());

function keyFile(content: string, mode: number): string {
  const path = join(test.dir('executor-key-'), 'executor.key');
  writeFileSync(path, content, { mode });
  return path;
}

describe('--api-key-file', () => {
  it('reads a 0600 or 0400 file, dropping one trailing newline', () => {
    expect(readApiKeyFile(keyFile('treg_secret\n', 0o600))).toBe('treg_secret');
    expect(readApiKeyFile(keyFile('treg_secret\r\n', 0o400))).toBe('treg_secret');
    expect(readApiKeyFile(keyFile('treg_secret', 0o600))).toBe('treg_secret');
  });

  it('refuses a file group or others can read, saying how to fix it', () => {
    const path = keyFile('treg_secret\n', 0o644);
    expect(() => readApiKeyFile(path)).toThrow(ApiKeyError);
    expect(() => readApiKeyFile(path)).toThrow(`mode 0644 lets group or others read it; run \`chmod 600 ${path}\``);
    expect(() => readApiKeyFile(keyFile('treg_secret\n', 0o640))).toThrow('mode 0640');
  });

  it('refuses what is not a regular file, a missing file, an empty key and a multi-line file', () => {
    const dir = test.dir('executor-key-');
    expect(() => readApiKeyFile(dir)).toThrow('not a regular file');
    const fifo = join(dir, 'fifo');
    execFileSync('mkfifo', ['-m', '600', fifo]);
    expect(() => readApiKeyFile(fifo)).toThrow('not a regular file');
    expect(() => readApiKeyFile(join(dir, 'missing'))).toThrow('cannot open it');
    expect(() => readApiKeyFile(keyFile('\n', 0o600))).toThrow('the API key is empty');
    expect(() => readApiKeyFile(keyFile('one\ntwo\n', 0o600))).toThrow('whitespace or control characters');
  });

  it('never puts the key in an error', () => {
    const path = keyFile('treg_do_not_print two\n', 0o600);
    expect(() => readApiKeyFile(path)).toThrow(
      expect.objectContaining({ message: expect.not.stringContaining('treg') }),
    );
  });
});

describe('--api-key-fd', () => {
  it('reads the descriptor to EOF and closes it', () => {
    const native = loadNativePipe();
    expect(native, 'the native pipe addon is built in CI').not.toBeNull();
    const [readFd, writeFd] = native!.pipe();
    writeSync(writeFd, 'treg_from_a_pipe\n');
    closeSync(writeFd);
    expect(readApiKeyFd(readFd)).toBe('treg_from_a_pipe');
    expect(() => closeSync(readFd)).toThrow(/EBADF/);
  });

  it('refuses stdio descriptors and descriptors that are not open', () => {
    expect(() => readApiKeyFd(0)).toThrow('descriptors 0-2 are stdio');
    expect(() => readApiKeyFd(987_654)).toThrow('not an open file descriptor');
  });
});

describe('a key in the environment', () => {
  it('is held to the same length bound as a file or fd (a longer one would block its handover pipe)', () => {
    const long = 'k'.repeat(MAX_API_KEY_BYTES + 1);
    expect(() =>
      readApiKey({ kind: 'env', variable: 'TETHER_EXECUTOR_API_KEY' }, { TETHER_EXECUTOR_API_KEY: long }),
    ).toThrow(`TETHER_EXECUTOR_API_KEY: the API key is longer than ${MAX_API_KEY_BYTES} bytes`);
    const fits = 'k'.repeat(MAX_API_KEY_BYTES);
    expect(readApiKey({ kind: 'env', variable: 'TETHER_EXECUTOR_API_KEY' }, { TETHER_EXECUTOR_API_KEY: fits })).toBe(
      fits,
    );
  });
});

describe('choosing the source', () => {
  it('prefers the flags, then TETHER_EXECUTOR_API_KEY, then CODEX_API_KEY, then the deprecated shared names', () => {
    const env = { TETHER_API_KEY_FILE: '/k', TETHER_API_KEY: 'a', CODEX_API_KEY: 'b', TETHER_EXECUTOR_API_KEY: 'c' };
    expect(chooseApiKeySource({ apiKeyFd: 5 }, env)).toEqual({ kind: 'fd', fd: 5 });
    expect(chooseApiKeySource({ apiKeyFile: '/f' }, env)).toMatchObject({ kind: 'file', path: '/f' });
    expect(chooseApiKeySource({}, env)).toEqual({ kind: 'env', variable: 'TETHER_EXECUTOR_API_KEY' });
    const { TETHER_EXECUTOR_API_KEY: _own, ...codex } = env;
    expect(chooseApiKeySource({}, codex)).toEqual({ kind: 'env', variable: 'CODEX_API_KEY' });
    // TETHER_API_KEY_FILE and TETHER_API_KEY are the harness's names too: read last, the file first.
    expect(chooseApiKeySource({}, { TETHER_API_KEY_FILE: '/k', TETHER_API_KEY: 'a' })).toMatchObject({
      kind: 'file',
      path: '/k',
      flag: 'TETHER_API_KEY_FILE',
    });
    expect(chooseApiKeySource({}, { TETHER_API_KEY: 'a', CODEX_API_KEY: ' ' })).toEqual({
      kind: 'env',
      variable: 'TETHER_API_KEY',
    });
    expect(chooseApiKeySource({}, {})).toBeNull();
    expect(() => chooseApiKeySource({ apiKeyFd: 5, apiKeyFile: '/f' }, {})).toThrow('not both');
  });
});

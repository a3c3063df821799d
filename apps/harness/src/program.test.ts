/**
 * A command named first gets a program of that command alone (cli.ts `COMMANDS`): the table must be the
 * program's, and what such a program answers must be what the whole program answers.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Writable } from 'node:stream';
import type { Command } from 'commander';
import { afterAll, describe, expect, it } from 'vitest';
import { buildProgram, COMMANDS, run } from './cli.js';

const work = mkdtempSync(join(tmpdir(), 'harness-program-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const quiet = { write: () => true };
const io = { stdin: process.stdin, stdout: quiet, stderr: quiet, env: {} } as never;
const names = (program: Command) => program.commands.map((command) => command.name());

async function outcome(argv: string[], wholeProgram: boolean) {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  stdout.on('data', (chunk: Buffer) => out.push(chunk));
  stderr.on('data', (chunk: Buffer) => err.push(chunk));
  const env = { TETHER_CONFIG: join(work, 'no-config.toml'), TETHER_REUSE: 'no' };
  const code = await run(argv, { stdin: new PassThrough(), stdout, stderr, env }, { wholeProgram });
  return { code, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() };
}

/** Every command path of the program: ['exec'], ['config', 'view'], … */
function paths(command: Command, prefix: string[] = []): string[][] {
  return command.commands.flatMap((sub) => [[...prefix, sub.name()], ...paths(sub, [...prefix, sub.name()])]);
}

describe('the program of one command', () => {
  it('holds the commands the table names for it; the table covers the whole program', () => {
    const whole = buildProgram(io, () => {});
    expect(names(whole)).toEqual([...COMMANDS.flatMap(([commandNames]) => commandNames), 'completion']);
    for (const [commandNames] of COMMANDS) {
      for (const name of commandNames)
        expect(names(buildProgram(io, () => {}, [name, '--help']))).toEqual(commandNames);
    }
    // Flags before the command, a misspelt command and completion get the whole program.
    for (const argv of [['--registry', 'x', 'exec'], ['exex'], ['completion', 'bash'], []]) {
      expect(names(buildProgram(io, () => {}, argv))).toEqual(names(whole));
    }
  });

  it('answers help, usage errors and failures before connecting as the whole program does', async () => {
    const cases = [
      ...paths(buildProgram(io, () => {})).map((path) => [...path, '--help']),
      ['exec'],
      ['exec', '--bogus', '--', 'true'],
      ['exec', '-n', '-i', '--', 'true'],
      ['exec', '--sandbox', 'nope', '--', 'true'],
      ['exec', '--writable', '/tmp', '--', 'true'],
      ['exec', '--', 'true'],
      ['shell', '--bogus'],
      ['kill', '-s', 'BOGUS', 'abc'],
      ['attach', '--detach-keys', 'ctrl-1', 'abc'],
      ['cp'],
      ['cp', 'a'],
      ['ls', 'env:relative'],
      ['cat'],
      ['forward', 'nonsense'],
      ['master', 'start', '--pool', '99'],
      ['master', 'bogus'],
      ['config', 'bogus'],
      ['config', 'use-context'],
      ['login', '--bogus'],
      ['exec', '--connect-timeout', 'soon', '--', 'true'],
    ];
    for (const argv of cases) {
      const narrowed = await outcome(argv, false);
      expect({ argv, ...narrowed }).toEqual({ argv, ...(await outcome(argv, true)) });
      expect(narrowed.stdout + narrowed.stderr).not.toBe('');
    }
  });
});

describe('help output', () => {
  it('leaves in one write, so a reader that stops early (| head) takes it whole', async () => {
    const writes: string[] = [];
    const stdout = new Writable({
      write(chunk: Buffer, _encoding, done) {
        writes.push(chunk.toString());
        done();
      },
    });
    const env = { TETHER_CONFIG: join(work, 'no-config.toml'), TETHER_REUSE: 'no' };
    const code = await run(['exec', '--help'], {
      stdin: new PassThrough(),
      stdout,
      stderr: new PassThrough(),
      env,
    } as never);
    expect(code).toBe(0);
    expect(writes).toHaveLength(1);
    expect(writes[0]).toMatch(/^Usage: harness exec/);
    expect(writes[0]).toContain('Exit status');
  });
});

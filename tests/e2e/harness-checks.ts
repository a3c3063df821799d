import { join } from 'node:path';
import { patternCommand, patternSha256, peerMarkerEnv, runToEnd, type Stack } from '@tether/test-kit';
import { expect } from 'vitest';

export interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Where a harness binary runs its commands: the stack, the environment, a working directory of the test's. */
export interface HarnessTarget {
  stack: Stack;
  environmentId: string;
  /** The remote commands' cwd (the tests' leak checks look for processes under it); holds no config file. */
  work: string;
  /** More variables for the harness. */
  env?: NodeJS.ProcessEnv;
}

/** Runs `command args` to its end (stdin closed) with the harness variables naming `target`. */
export async function runWithTarget(command: string, args: string[], target: HarnessTarget): Promise<Outcome> {
  const { code, stdout, stderr } = await runToEnd(command, args, {
    env: {
      ...process.env,
      TETHER_HARNESS_REGISTRY: target.stack.registryUrl,
      TETHER_HARNESS_ENVIRONMENT_ID: target.environmentId,
      TETHER_HARNESS_API_KEY: target.stack.keys.harness,
      // Never the user's config file.
      TETHER_CONFIG: join(target.work, 'no-config.toml'),
      ...peerMarkerEnv(),
      ...target.env,
    },
  });
  return { code, stdout, stderr };
}

/** `harness exec -- sh -c 'echo hi; exit 3'` prints hi and exits 3. */
export async function expectExitCodeAndOutput(harness: string, target: HarnessTarget): Promise<void> {
  const args = ['exec', '--cwd', target.work, '--', 'sh', '-c', 'echo hi; exit 3'];
  expect(await runWithTarget(harness, args, target)).toEqual({ code: 3, stdout: 'hi\n', stderr: '' });
}

/** 16 MiB of output through `harness exec … | sha256sum` hash as the pattern does; the harness exits 0. */
export async function expectLargeOutput(harness: string, target: HarnessTarget): Promise<void> {
  const bytes = 16 * 1024 * 1024;
  const command = [harness, 'exec', '--cwd', target.work, '--', ...patternCommand('INST', bytes)];
  const quoted = command.map((arg) => `'${arg.replaceAll("'", `'\\''`)}'`).join(' ');
  const result = await runWithTarget('bash', ['-c', `${quoted} | sha256sum; exit "\${PIPESTATUS[0]}"`], target);
  expect(result).toEqual({ code: 0, stdout: `${patternSha256('INST', bytes)}  -\n`, stderr: '' });
}

import type { Command } from 'commander';
import { type CliIo, connectOptions, type SetExit, withEnvironment } from '../common.js';
import type { ConnectFlags } from '../target.js';
import { EXIT_CODES_HELP, type ExecFlags, runOptions, runRemote } from './exec.js';

/**
 * The remote user's login shell, as ssh starts it: `$SHELL -l` (SHELL as the executor's environment has it;
 * both executors put the user's login shell there for a terminal when it is unset), else /bin/sh.
 */
// biome-ignore lint/suspicious/noTemplateCurlyInString: a shell's parameter expansion, for the remote sh
export const LOGIN_SHELL_ARGV: readonly string[] = ['/bin/sh', '-c', 'exec "${SHELL:-/bin/sh}" -l'];

export function registerShell(program: Command, io: CliIo, setExit: SetExit): void {
  connectOptions(
    runOptions(
      program
        .command('shell')
        .description('open a login shell on the environment in a pseudo-terminal (like ssh HOST)')
        .argument('[environment]', 'environment id (default: --environment-id, its variable, or the context)'),
    ),
  )
    .addHelpText(
      'after',
      `
The shell is $SHELL -l on the environment, in a terminal of this window's size that follows it when it
is resized; TERM is sent as ssh sends it. stdin is forwarded whether or not it is a terminal.
${EXIT_CODES_HELP}

Examples:
  harness shell dev-1
  harness shell --cwd /srv/app -e LANG=C.UTF-8`,
    )
    .action(async (environment: string | undefined, options: ConnectFlags & Omit<ExecFlags, 'tty' | 'interactive'>) => {
      const flags: ExecFlags = { ...options, tty: true, interactive: true };
      setExit(
        await withEnvironment(io, options, environment, (env) => runRemote(env, [...LOGIN_SHELL_ARGV], flags, io)),
      );
    });
}

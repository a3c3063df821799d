// `exec --network-ask`: the person at the terminal decides each host the command reaches that --network-allow
// does not name (the executor's `network/policyRequest`, capability `networkProxyReviewDomains`), as a
// desktop firewall asks. Questions and answers go through /dev/tty, never the command's stdin or our stdout, so
// pipes on either side stay the command's: `harness exec --network-ask -- curl … | jq` still asks.

import { openSync } from 'node:fs';
import { ReadStream, WriteStream } from 'node:tty';
import { type NetworkAnswer, type NetworkQuestion, TetherError } from '@tether/client';
import { printable } from '../common.js';

/** How long the executor waits for the person (plus its 5 s grace) before it refuses the host. */
export const ASK_TIMEOUT_MS = 120_000;

/** The hosts answered for at most (each answer holds for the rest of the command); past it, ask anew. */
const REMEMBERED_HOSTS = 1000;

export interface TerminalAsker {
  ask(question: NetworkQuestion): Promise<NetworkAnswer>;
  /** Closes the terminal; a question still open is refused. */
  close(): void;
}

/** The streams a question is asked on: /dev/tty's, or a test's. */
export interface AskStreams {
  input: NodeJS.ReadableStream & { destroy(): void };
  output: NodeJS.WritableStream & { destroy(): void };
}

/** Opens the controlling terminal; none (a service, CI, `setsid`) is a usage error that says so. */
export function openTerminal(path = '/dev/tty'): AskStreams {
  let readFd: number;
  let writeFd: number;
  try {
    readFd = openSync(path, 'r');
    writeFd = openSync(path, 'w');
  } catch (err) {
    throw new TetherError(
      'invalid_argument',
      `--network-ask asks on the terminal, and there is none (${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`,
    );
  }
  return { input: new ReadStream(readFd), output: new WriteStream(writeFd) };
}

/**
 * Asks one question at a time: `harness: network: let the command reach HOST:PORT (PROTOCOL)? [y/N]`; `y` or
 * `yes` allows, anything else (an empty line too) refuses. An answer holds for that host and port for the
 * rest of the command.
 */
export function terminalAsker(streams: AskStreams): TerminalAsker {
  const answered = new Map<string, NetworkAnswer>();
  let queue: Promise<unknown> = Promise.resolve();
  let pending: ((line: string | null) => void) | null = null;
  let buffered = '';
  let closed = false;
  const lines: string[] = [];
  const onData = (chunk: Buffer | string) => {
    buffered += chunk.toString();
    // A line longer than any answer is cut: what a person types is a word.
    if (buffered.length > 4096) buffered = buffered.slice(-4096);
    let end = buffered.indexOf('\n');
    while (end >= 0) {
      lines.push(buffered.slice(0, end));
      buffered = buffered.slice(end + 1);
      end = buffered.indexOf('\n');
    }
    if (pending && lines.length > 0) {
      const resolve = pending;
      pending = null;
      streams.input.pause();
      resolve(lines.shift()!);
    }
  };
  streams.input.on('data', onData);
  streams.input.on('error', () => close());
  streams.input.pause();
  const nextLine = () =>
    new Promise<string | null>((resolve) => {
      if (closed) return resolve(null);
      if (lines.length > 0) return resolve(lines.shift()!);
      pending = resolve;
      streams.input.resume();
    });
  const close = () => {
    if (closed) return;
    closed = true;
    streams.input.off('data', onData);
    pending?.(null);
    pending = null;
    streams.input.destroy();
    streams.output.destroy();
  };
  const askNow = async (question: NetworkQuestion): Promise<NetworkAnswer> => {
    const key = `${question.host.toLowerCase()}:${question.port}`;
    const known = answered.get(key);
    if (known !== undefined) return known;
    if (closed) return 'deny';
    // The host comes from the executor (untrusted): nothing but printable text reaches the terminal.
    streams.output.write(
      `harness: network: let the command reach ${printable(question.host)}:${question.port} (${question.protocol})? [y/N] `,
    );
    const line = await nextLine();
    const answer: NetworkAnswer = line !== null && /^\s*y(es)?\s*$/i.test(line) ? 'allow' : { deny: 'denied_by_user' };
    if (answered.size < REMEMBERED_HOSTS) answered.set(key, answer);
    return answer;
  };
  return {
    ask(question) {
      const answer = queue.then(() => askNow(question));
      queue = answer.catch(() => undefined);
      return answer;
    },
    close,
  };
}

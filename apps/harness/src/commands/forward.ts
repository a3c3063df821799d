import { createServer, isIP, type Server, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { type Environment, TCP_FORWARD_CAPABILITY, TetherError } from '@tether/client';
import { type Command, InvalidArgumentError } from 'commander';
import {
  type CliIo,
  connectOptions,
  outputFailed,
  printable,
  report,
  type SetExit,
  withEnvironment,
  writeOutput,
} from '../common.js';
import type { ConnectFlags } from '../target.js';

/** One `[BIND:]LPORT:HOST:RPORT`. */
export interface ForwardSpec {
  /** Local address to listen on; null: every interface (`*`). */
  bind: string | null;
  localPort: number;
  host: string;
  remotePort: number;
  /** As written, for messages. */
  text: string;
}

/** Splits on `:` outside `[…]` (IPv6 addresses are written in brackets, as ssh takes them). */
function fields(text: string): string[] {
  const out: string[] = [];
  let current = '';
  let inBrackets = false;
  for (const char of text) {
    if (char === '[' && current === '' && !inBrackets) inBrackets = true;
    else if (char === ']' && inBrackets) inBrackets = false;
    else if (char === ':' && !inBrackets) {
      out.push(current);
      current = '';
      continue;
    }
    current += char;
  }
  if (inBrackets) throw new InvalidArgumentError(`unclosed [ in ${JSON.stringify(text)}`);
  out.push(current);
  return out;
}

function unbracket(host: string): string {
  return host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
}

function port(text: string, what: string, spec: string, allowZero: boolean): number {
  const value = Number(text);
  if (!/^\d{1,5}$/.test(text) || value > 65535 || (!allowZero && value === 0)) {
    throw new InvalidArgumentError(
      `${what} in ${JSON.stringify(spec)} must be ${allowZero ? '0-65535 (0 picks a free port)' : '1-65535'}`,
    );
  }
  return value;
}

/** Parses `[BIND:]LPORT:HOST:RPORT` (ssh -L's syntax; `[…]` around IPv6 addresses). */
export function parseForwardSpec(text: string): ForwardSpec {
  const parts = fields(text.trim());
  if (parts.length !== 3 && parts.length !== 4) {
    throw new InvalidArgumentError(
      `expected [BIND:]LPORT:HOST:RPORT, got ${JSON.stringify(text)} (IPv6 addresses go in brackets: [::1])`,
    );
  }
  const [bindText, lport, host, rport] = parts.length === 4 ? parts : [undefined, ...parts];
  const remoteHost = unbracket(host ?? '');
  if (remoteHost === '' || remoteHost.length > 255 || /[\s/]/.test(remoteHost)) {
    throw new InvalidArgumentError(`HOST in ${JSON.stringify(text)} must be a host name or address`);
  }
  let bind: string | null = '127.0.0.1';
  if (bindText !== undefined) {
    const address = unbracket(bindText);
    if (address === '*' || address === '') bind = null;
    else if (address === 'localhost' || isIP(address) !== 0) bind = address;
    else throw new InvalidArgumentError(`BIND in ${JSON.stringify(text)} must be an IP address, localhost or *`);
  }
  return {
    bind,
    localPort: port(lport ?? '', 'LPORT', text, true),
    host: remoteHost,
    remotePort: port(rport ?? '', 'RPORT', text, false),
    text,
  };
}

function collectSpec(value: string, previous: ForwardSpec[] = []): ForwardSpec[] {
  return [...previous, parseForwardSpec(value)];
}

function formatAddress(host: string, portNumber: number): string {
  return host.includes(':') ? `[${host}]:${portNumber}` : `${host}:${portNumber}`;
}

export function registerForward(program: Command, io: CliIo, setExit: SetExit): void {
  connectOptions(
    program
      .command('forward')
      .description(
        'forward local TCP ports to HOST:RPORT as seen from the environment (like ssh -L), inside the encrypted session',
      )
      .argument(
        '<spec...>',
        '[BIND:]LPORT:HOST:RPORT — listen on BIND:LPORT here (default bind 127.0.0.1; * = every interface; LPORT 0 picks a free port, printed), connect to HOST:RPORT from the executor',
        collectSpec,
      )
      .addHelpText(
        'after',
        `
Each line "forwarding BIND:LPORT -> HOST:RPORT" on stdout says where one spec listens. Runs until Ctrl-C or
SIGTERM, then closes every connection. A connection the executor refuses (its policy allows loopback
targets only unless started with --forward-allow; nothing listening; an unknown host) is closed and
reported on stderr; the forward goes on. Needs an executor that offers forwarding (capability tcpForward;
codex exec-server does not): exit code 1 otherwise.

Examples:
  harness forward 8080:localhost:80
  harness forward 0:127.0.0.1:5432 '[::1]:9000:[::1]:9000'
  harness forward '*:3000:localhost:3000'`,
      ),
  ).action(async (specs: ForwardSpec[], options: ConnectFlags) => {
    setExit(await withEnvironment(io, options, undefined, (env) => forwardCommand(env, specs, io)));
  });
}

/** One accepted connection and its stream to the executor. */
interface Pair {
  local: Socket;
  remote: Duplex | null;
}

async function forwardCommand(env: Environment, specs: ForwardSpec[], io: CliIo): Promise<number> {
  if (env.client && !env.client.capabilities.has(TCP_FORWARD_CAPABILITY)) {
    throw new TetherError(
      'invalid_state',
      'this executor does not offer TCP forwarding (capability tcpForward): codex exec-server has no such extension, and a Tether executor started with --no-forward refuses it',
    );
  }
  const servers: Server[] = [];
  const pairs = new Set<Pair>();
  let finish!: (code: number) => void;
  const finished = new Promise<number>((resolve) => {
    finish = resolve;
  });
  const onSignal = () => finish(0);
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const offClosed = env.client?.onClosed((error) => {
    io.stderr.write(`harness: ${printable(error.message)}\n`);
    finish(1);
  });
  try {
    for (const spec of specs) {
      const server = createServer({ allowHalfOpen: true, pauseOnConnect: true }, (local) =>
        accept(env, spec, local, pairs, io),
      );
      servers.push(server);
      await new Promise<void>((resolve, reject) => {
        server.once('error', (err: NodeJS.ErrnoException) =>
          reject(
            new TetherError(
              'connect_failed',
              `cannot listen on ${formatAddress(spec.bind ?? '*', spec.localPort)} for ${spec.text}: ${err.code ?? err.message}`,
            ),
          ),
        );
        server.listen({ port: spec.localPort, ...(spec.bind === null ? {} : { host: spec.bind }) }, () => resolve());
      });
      server.on('error', (err) => io.stderr.write(`harness: forward ${spec.text}: ${printable(err.message)}\n`));
      const address = server.address();
      const where =
        address && typeof address === 'object'
          ? formatAddress(spec.bind === null ? '*' : address.address, address.port)
          : spec.text;
      await writeOutput(io, io.stdout, `forwarding ${where} -> ${formatAddress(spec.host, spec.remotePort)}\n`);
    }
    // Our stdout's reader gone (`| head -1` took the first line, and a later one found no reader): stopped.
    return await Promise.race([finished, outputFailed(io)]);
  } catch (err) {
    return report(io, err);
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    offClosed?.();
    // Stop accepting, then end every connection (a server's close waits for its connections).
    const closed = servers.map((server) => new Promise((resolve) => server.close(resolve)));
    for (const pair of pairs) {
      pair.local.destroy();
      pair.remote?.destroy();
    }
    pairs.clear();
    await Promise.all(closed);
  }
}

/** Connects one accepted socket through the executor; failures close it and are reported, nothing more. */
function accept(env: Environment, spec: ForwardSpec, local: Socket, pairs: Set<Pair>, io: CliIo): void {
  const pair: Pair = { local, remote: null };
  pairs.add(pair);
  const label = `forward ${spec.text}`;
  let reported = false;
  const fail = (err: Error) => {
    if (reported) return;
    reported = true;
    io.stderr.write(`harness: ${label}: ${printable(err.message)}\n`);
  };
  local.on('error', () => {
    // The local peer reset: the stream to the executor goes with it.
    pair.remote?.destroy();
  });
  local.once('close', (hadError) => {
    pairs.delete(pair);
    if (hadError) pair.remote?.destroy();
  });
  env.connectTcp(spec.host, spec.remotePort).then(
    (remote) => {
      if (local.destroyed) {
        remote.destroy();
        return;
      }
      pair.remote = remote;
      remote.on('error', (err: Error) => {
        fail(err);
        local.destroy();
      });
      // The executor's side is gone (both directions done, or reset): ours ends after what is queued.
      remote.once('close', () => {
        if (!local.destroyed) local.destroySoon();
      });
      // Each direction ends on its own (half-close both ways).
      local.pipe(remote);
      // What comes from the executor may sit in a pooled buffer of the connection's: it goes back once the
      // local socket has written it.
      remote.on('data', (chunk: Buffer) => {
        if (!local.write(chunk, () => remote.giveBack?.(chunk))) remote.pause();
      });
      local.on('drain', () => remote.resume());
      remote.once('end', () => local.end());
      local.resume();
    },
    (err: Error) => {
      fail(err);
      local.destroy();
    },
  );
}

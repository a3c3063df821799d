// The managed proxy's relay inside a sandbox (network-proxy.ts, process.ts): bubblewrap's first process when a
// sandboxed start enforces Codex's managed network. The sandbox has a network namespace of its own (only its
// loopback), so the command cannot reach the executor's proxy on the host's 127.0.0.1; this listens on fresh
// 127.0.0.1 ports inside (the HTTP listener's, and the SOCKS5 one's when there is one), points the command's
// proxy variables at them, runs the command, and ends with it (its exit code, or its signal). As Codex's helper,
// it makes no socket to reach the proxy (the sandbox's seccomp filter refuses AF_UNIX sockets): per client it
// writes a byte on the inherited `control` socket (`c` for the HTTP listener, `s` for the SOCKS5 one), and the
// executor answers `y` having sent the upstream connection's descriptor over the inherited `pass` socket, or `n`.
//
// With transparent TCP (`--transparent <port>`, Codex's `networkProxyTransparentTcp`), it also listens on
// 127.0.0.1 and ::1 at `port` and, before the command starts, asks the executor (`t`, having sent one end of a
// socket pair of its own over `pass`, by which the executor learns its pid) to redirect the namespace's TCP
// there (@tether/sandbox transparent-tcp.ts). Each redirected connection goes to the SOCKS5 listener as a
// CONNECT to where it was headed (`SO_ORIGINAL_DST`): decided as `socks5_tcp`, reset when refused. DNS to the
// sandbox's nameservers is redirected to the same port (UDP), where a resolver gives each name an address of its own
// (relay-dns.ts): a connection to one goes to the SOCKS5 listener as a CONNECT to the name, as under Codex.
//
// argv: <control fd> <pass fd> <the host proxy's URL> <max connections> [--socks <the host SOCKS5 URL>]
// [--transparent <port>] -- <program> [args…]. It runs from the executor's dist as a plain script;
// @tether/native-pipe passes the descriptors.

import { spawn } from 'node:child_process';
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { closeSync } from 'node:fs';
import { createServer, isIPv4, type Server, Socket } from 'node:net';
import { constants } from 'node:os';
import { loadNativePipe, type NativePipe, nativePipeUnavailableReason } from '@tether/native-pipe';
import { socketFd } from '@tether/user-read';
import { FakeResolver } from './relay-dns.js';
import { socksConnect } from './relay-socks.js';

const USAGE =
  'usage: <control fd> <pass fd> <proxy url> <max connections> [--socks <url>] [--transparent <port>] -- <program> [args…]';
const [controlText, passText, hostUrl, maxText, ...rest] = process.argv.slice(2);
const controlFd = Number(controlText);
const passFd = Number(passText);
let hostSocksUrl: string | null = null;
let transparentPort: number | null = null;
while (rest[0] === '--socks' || rest[0] === '--transparent') {
  const [option, value] = rest.splice(0, 2);
  if (option === '--socks') hostSocksUrl = value ?? null;
  else transparentPort = Number(value);
}
const [separator, program, ...args] = rest;
if (
  !Number.isSafeInteger(controlFd) ||
  !Number.isSafeInteger(passFd) ||
  !hostUrl ||
  separator !== '--' ||
  !program ||
  (transparentPort !== null && !(Number.isSafeInteger(transparentPort) && transparentPort > 0))
) {
  process.stderr.write(`tether proxy relay: ${USAGE}\n`);
  process.exit(125);
}
const loaded = loadNativePipe();
if (loaded === null) {
  process.stderr.write(`tether proxy relay: cannot receive descriptors: ${nativePipeUnavailableReason()}\n`);
  process.exit(125);
}
const native: NativePipe = loaded;
// Nothing the relay holds reaches the command: every descriptor above stdio is close-on-exec from here (the
// channel's two, bubblewrap's, any inherited one).
native.setCloexecAbove(2);

// The process group's signals reach the command directly; the relay outlives them until the command ends.
const HELD = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT', 'SIGUSR2', 'SIGPIPE'] as const;
const hold = () => undefined;
for (const signal of HELD) process.on(signal, hold);

const max = Math.max(1, Number(maxText) || 1);
/** Every client of every listener, bounded together by `max`. */
const clients = new Set<Socket>();

/** What waits for the executor's answer, in the order asked: `y` is true. */
const waiting: ((granted: boolean) => void)[] = [];
const control = new Socket({ fd: controlFd, readable: true, writable: true });
let controlOpen = true;
const controlGone = () => {
  controlOpen = false;
  for (const answer of waiting.splice(0)) answer(false);
};
control.on('error', controlGone).on('close', controlGone);
control.on('data', (answers: Buffer) => {
  for (const answer of answers) waiting.shift()?.(answer === 0x79);
});
// The command's end decides when the relay ends, not the channel.
control.unref();

/** Asks the executor for `request`; `then` gets its answer (false when the channel is gone). */
function ask(request: 'c' | 's' | 't', then: (granted: boolean) => void): void {
  if (!controlOpen) {
    then(false);
    return;
  }
  waiting.push(then);
  control.write(request);
}

/** An upstream connection to the proxy's HTTP (`c`) or SOCKS5 (`s`) listener, or null when refused. */
function upstreamFor(request: 'c' | 's', then: (upstream: Socket | null) => void): void {
  ask(request, (granted) => {
    const fd = granted ? native.receiveFd(passFd) : null;
    then(fd === null ? null : new Socket({ fd, readable: true, writable: true, allowHalfOpen: true }));
  });
}

function pipeBoth(client: Socket, upstream: Socket): void {
  const end = () => {
    client.destroy();
    upstream.destroy();
  };
  client.on('close', end);
  upstream.on('error', end).on('close', end);
  client.pipe(upstream);
  upstream.pipe(client);
  client.resume();
  upstream.resume();
}

/** Takes `client` into the relay's bound, or refuses it (false). */
function admit(client: Socket): boolean {
  client.on('error', () => client.destroy());
  if (!controlOpen || clients.size >= max) {
    client.destroy();
    return false;
  }
  clients.add(client);
  client.once('close', () => clients.delete(client));
  return true;
}

/** A listener whose clients are relayed to the proxy's `request` listener as they are. */
function relayTo(request: 'c' | 's'): Server {
  return createServer({ allowHalfOpen: true }, (client: Socket) => {
    if (!admit(client)) return;
    upstreamFor(request, (upstream) => {
      if (upstream === null) return void client.destroy();
      if (client.destroyed) return void upstream.destroy();
      pipeBoth(client, upstream);
    });
  });
}

/** Where a redirected connection was headed, or null for one that was not (the loopback, its own port). */
function headedFor(client: Socket): { address: string; port: number } | null {
  const fd = socketFd(client);
  if (fd === null) return null;
  try {
    const target = native.originalDestination(fd);
    const loopback = isIPv4(target.address) ? target.address.startsWith('127.') : target.address === '::1';
    return loopback ? null : target;
  } catch {
    return null;
  }
}

/** The names given out to the command (transparent TCP only). */
const resolver = new FakeResolver();

/**
 * Transparent TCP: each connection goes to the SOCKS5 listener as a CONNECT to where it was headed, the name for
 * an address the resolver gave out; one to an address of its pool it never gave out is reset undecided (Codex's).
 */
function transparent(): Server {
  return createServer({ allowHalfOpen: true, pauseOnConnect: true }, (client: Socket) => {
    if (!admit(client)) return;
    const target = headedFor(client);
    if (target === null) return void client.resetAndDestroy();
    const host = resolver.nameFor(target.address) ?? target.address;
    if (host === target.address && FakeResolver.inPool(host)) return void client.resetAndDestroy();
    upstreamFor('s', (upstream) => {
      if (upstream === null) return void client.resetAndDestroy();
      void socksConnect(upstream, host, target.port).then((early) => {
        // Refused (denied, not allowed, unreachable): the command sees its connection reset, as under Codex.
        if (early === null || client.destroyed) {
          upstream.destroy();
          return void client.resetAndDestroy();
        }
        if (early.length > 0) client.write(early);
        pipeBoth(client, upstream);
      });
    });
  });
}

/** The resolver's UDP socket on `host`:`port`, where the namespace's DNS is redirected. */
function resolving(port: number, host: string): Promise<UdpSocket> {
  const socket = createSocket(host.includes(':') ? 'udp6' : 'udp4');
  socket.on('message', (query, from) => {
    const answer = resolver.answer(query);
    if (answer !== null) socket.send(answer, from.port, from.address);
  });
  return new Promise((resolve, reject) => {
    socket.once('error', reject);
    socket.bind(port, host, () => {
      socket.off('error', reject);
      socket.on('error', () => undefined);
      resolve(socket);
    });
  });
}

function listen(server: Server, port: number, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve((server.address() as { port: number }).port);
    });
  });
}

/** Has the executor route the namespace's TCP to `port`; resolves once it has, rejects when it could not. */
function routeTransparent(): Promise<void> {
  return new Promise((resolve, reject) => {
    // The executor learns this process's pid from the pair's maker (SO_PEERCRED on the end it receives).
    const [mine, theirs] = native.socketPair();
    try {
      native.sendFd(passFd, theirs);
    } catch (err) {
      closeSync(mine);
      closeSync(theirs);
      return reject(err);
    }
    closeSync(theirs);
    ask('t', (granted) => {
      closeSync(mine);
      if (granted) resolve();
      else reject(new Error('the executor could not redirect the sandbox’s TCP'));
    });
  });
}

const servers: { close(): void }[] = [];
async function main(): Promise<void> {
  const env: Record<string, string> = { ...(process.env as Record<string, string>) };
  // The transparent listener first: its port is the executor's pick, free in a namespace nothing else uses yet.
  if (transparentPort !== null) {
    const v4 = transparent();
    servers.push(v4);
    await listen(v4, transparentPort, '127.0.0.1');
    const v6 = transparent();
    servers.push(v6);
    await listen(v6, transparentPort, '::1');
    for (const host of ['127.0.0.1', '::1']) servers.push(await resolving(transparentPort, host));
    await routeTransparent();
  }
  const relayed: [string, 'c' | 's', string][] = [[hostUrl!, 'c', 'http']];
  if (hostSocksUrl !== null) relayed.push([hostSocksUrl, 's', 'socks5h']);
  for (const [url, request, scheme] of relayed) {
    const server = relayTo(request);
    servers.push(server);
    const inside = `${scheme}://127.0.0.1:${await listen(server, 0, '127.0.0.1')}`;
    for (const [name, value] of Object.entries(env)) if (value === url) env[name] = inside;
  }
  const child = spawn(program!, args, { stdio: 'inherit', env });
  child.once('error', (err) => {
    process.stderr.write(`tether proxy relay: cannot run ${program}: ${err.message}\n`);
    process.exit(127);
  });
  child.once('exit', (code, signal) => {
    for (const server of servers) server.close();
    if (signal !== null) {
      // Die as the command died (bubblewrap reports it as such): the default action back first.
      for (const held of HELD) process.off(held, hold);
      process.kill(process.pid, signal);
    }
    process.exit(code ?? 128 + (signal === null ? 0 : constants.signals[signal]));
  });
}

main().catch((err: Error) => {
  process.stderr.write(`tether proxy relay: cannot prepare the sandbox's network: ${err.message}\n`);
  process.exit(125);
});

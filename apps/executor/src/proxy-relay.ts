// The managed proxy's relay inside a sandbox (network-proxy.ts, process.ts): bubblewrap's first process when a
// sandboxed start enforces Codex's managed network. The sandbox has a network namespace of its own (only its
// loopback), so the command cannot reach the executor's proxy on the host's 127.0.0.1; this listens on a fresh
// 127.0.0.1 port inside, points the command's proxy variables at that port, runs the command, and ends with it
// (its exit code, or its signal). As Codex's helper, it makes no socket to reach the proxy (the sandbox's
// seccomp filter refuses AF_UNIX sockets): per client it writes a byte on the inherited `control` socket, and
// the executor answers `y` having sent the upstream connection's descriptor over the inherited `pass` socket,
// or `n`.
//
// argv: <control fd> <pass fd> <the host proxy's URL> <max connections> -- <program> [args…]. It runs from the
// executor's dist as a plain script; @tether/native-pipe receives the descriptors.

import { spawn } from 'node:child_process';
import { createServer, Socket } from 'node:net';
import { constants } from 'node:os';
import { loadNativePipe, nativePipeUnavailableReason } from '@tether/native-pipe';

const [controlText, passText, hostUrl, maxText, separator, program, ...args] = process.argv.slice(2);
const controlFd = Number(controlText);
const passFd = Number(passText);
if (!Number.isSafeInteger(controlFd) || !Number.isSafeInteger(passFd) || !hostUrl || separator !== '--' || !program) {
  process.stderr.write(
    'tether proxy relay: usage: <control fd> <pass fd> <proxy url> <max connections> -- <program> [args…]\n',
  );
  process.exit(125);
}
const native = loadNativePipe();
if (native === null) {
  process.stderr.write(`tether proxy relay: cannot receive descriptors: ${nativePipeUnavailableReason()}\n`);
  process.exit(125);
}
// Nothing the relay holds reaches the command: every descriptor above stdio is close-on-exec from here (the
// channel's two, bubblewrap's, any inherited one).
native.setCloexecAbove(2);

// The process group's signals reach the command directly; the relay outlives them until the command ends.
const HELD = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT', 'SIGUSR2', 'SIGPIPE'] as const;
const hold = () => undefined;
for (const signal of HELD) process.on(signal, hold);

/** Clients waiting for their upstream, in the order they asked. */
const waiting: Socket[] = [];
const control = new Socket({ fd: controlFd, readable: true, writable: true });
let controlOpen = true;
const controlGone = () => {
  controlOpen = false;
  for (const client of waiting.splice(0)) client.destroy();
};
control.on('error', controlGone).on('close', controlGone);
control.on('data', (answers: Buffer) => {
  for (const answer of answers) {
    const client = waiting.shift();
    const fd = answer === 0x79 ? native.receiveFd(passFd) : null;
    if (fd === null) {
      client?.destroy();
      continue;
    }
    const upstream = new Socket({ fd, readable: true, writable: true, allowHalfOpen: true });
    if (client === undefined || client.destroyed) {
      upstream.destroy();
      continue;
    }
    pipeBoth(client, upstream);
  }
});
// The command's end decides when the relay ends, not the channel.
control.unref();

function pipeBoth(client: Socket, upstream: Socket): void {
  const end = () => {
    client.destroy();
    upstream.destroy();
  };
  client.on('close', end);
  upstream.on('error', end).on('close', end);
  client.pipe(upstream);
  upstream.pipe(client);
}

const server = createServer({ allowHalfOpen: true }, (client: Socket) => {
  client.on('error', () => client.destroy());
  if (!controlOpen) {
    client.destroy();
    return;
  }
  waiting.push(client);
  control.write('c');
});
server.maxConnections = Math.max(1, Number(maxText) || 1);

server.once('error', (err) => {
  process.stderr.write(`tether proxy relay: cannot listen on the sandbox's loopback: ${err.message}\n`);
  process.exit(125);
});
server.listen(0, '127.0.0.1', () => {
  const inside = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (value !== undefined) env[name] = value === hostUrl ? inside : value;
  }
  const child = spawn(program, args, { stdio: 'inherit', env });
  child.once('error', (err) => {
    process.stderr.write(`tether proxy relay: cannot run ${program}: ${err.message}\n`);
    process.exit(127);
  });
  child.once('exit', (code, signal) => {
    server.close();
    if (signal !== null) {
      // Die as the command died (bubblewrap reports it as such): the default action back first.
      for (const held of HELD) process.off(held, hold);
      process.kill(process.pid, signal);
    }
    process.exit(code ?? 128 + (signal === null ? 0 : constants.signals[signal]));
  });
});

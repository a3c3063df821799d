// The managed proxy's relay inside a sandbox (network-proxy.ts, process.ts): bubblewrap's first process when a
// sandboxed start enforces Codex's managed network. The sandbox has a network namespace of its own (only its
// loopback), so the command cannot reach the executor's proxy on the host's 127.0.0.1; this listens on a fresh
// 127.0.0.1 port inside, pipes each connection to the proxy's unix socket (bound into the sandbox), points the
// command's proxy variables at that port, runs the command, and ends with it (its exit code, or its signal).
//
// argv: <proxy socket> <the host proxy's URL> <max connections> -- <program> [args…]. Only node builtins: it
// runs from the executor's dist as a plain script.

import { spawn } from 'node:child_process';
import { connect, createServer, type Socket } from 'node:net';
import { constants } from 'node:os';

const [socketPath, hostUrl, maxText, separator, program, ...args] = process.argv.slice(2);
if (!socketPath || !hostUrl || separator !== '--' || !program) {
  process.stderr.write('tether proxy relay: usage: <socket> <proxy url> <max connections> -- <program> [args…]\n');
  process.exit(125);
}

// The process group's signals reach the command directly; the relay outlives them until the command ends.
const HELD = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT', 'SIGUSR2', 'SIGPIPE'] as const;
const hold = () => undefined;
for (const signal of HELD) process.on(signal, hold);

const server = createServer({ allowHalfOpen: true }, (client: Socket) => {
  const upstream = connect({ path: socketPath, allowHalfOpen: true });
  const end = () => {
    client.destroy();
    upstream.destroy();
  };
  client.on('error', end).on('close', end);
  upstream.on('error', end).on('close', end);
  client.pipe(upstream);
  upstream.pipe(client);
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

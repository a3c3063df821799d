import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { Sandboxer } from './sandboxer.js';
import {
  probeTransparentTcp,
  resolvConfNameservers,
  routeTransparentTcp,
  transparentTcpRules,
} from './transparent-tcp.js';

/**
 * In a network namespace of its own (as bubblewrap's), listens on 127.0.0.1:<argv[1]>; on each line of stdin,
 * connects to the `host port` it names and prints `<host> <port> <where the listener saw it arrive>` or the error.
 */
const INSIDE = `
const net = require('node:net');
const port = Number(process.argv[1]);
const server = net.createServer((s) => { s.end(s.localAddress + ':' + s.localPort); });
server.listen(port, '127.0.0.1', () => console.log('listening'));
require('node:readline').createInterface({ input: process.stdin }).on('line', (line) => {
  const [host, p] = line.split(' ');
  const socket = net.connect({ host, port: Number(p) });
  let got = '';
  socket.on('data', (d) => { got += d; });
  socket.on('close', (failed) => { if (!failed) console.log(line + ' ' + got); });
  socket.on('error', (e) => console.log(line + ' ' + e.code));
}).on('close', () => server.close());
`;

/** Until `pid` runs `program` (unshare has made its namespaces and exec'd it). */
async function waitForExec(pid: number, program: string): Promise<void> {
  for (;;) {
    if (readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === program) return;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

describe('transparent TCP', () => {
  const children: ChildProcessWithoutNullStreams[] = [];
  afterEach(() => {
    for (const child of children.splice(0)) child.kill('SIGKILL');
  });

  it('the rules redirect TCP but the loopback, both families, to the port given; a bad port is refused', () => {
    const rules = transparentTcpRules(10_123, ['127.0.0.53', '10.0.0.2', 'fd00::53']);
    expect(rules).toContain('ip daddr != 127.0.0.0/8 meta l4proto tcp redirect to :10123');
    expect(rules).toContain('ip6 daddr != ::1 meta l4proto tcp redirect to :10123');
    expect(rules).toContain('ip daddr { 127.0.0.53, 10.0.0.2 } udp dport 53 redirect to :10123');
    expect(rules).toContain('ip6 daddr { fd00::53 } udp dport 53 redirect to :10123');
    expect(transparentTcpRules(1, ['127.0.0.1'])).not.toContain('ip6 daddr {');
    for (const port of [0, 65_536, 1.5]) expect(() => transparentTcpRules(port, [])).toThrow(RangeError);
  });

  it("reads resolv.conf's nameservers (IP literals, zones dropped), else glibc's default", () => {
    const conf =
      '# c\nnameserver 127.0.0.53\nnameserver fe80::1%eth0\nnameserver bad.example\nsearch x\nnameserver 127.0.0.53\n';
    expect(resolvConfNameservers(conf)).toEqual(['127.0.0.53', 'fe80::1']);
    expect(resolvConfNameservers('search x\n')).toEqual(['127.0.0.1']);
  });

  it('is unavailable, saying why, where the sandbox is', () => {
    expect(probeTransparentTcp('no bwrap')).toEqual({
      available: false,
      reason: 'the sandbox is unavailable: no bwrap',
      tools: null,
    });
    expect(Sandboxer.none('none here').transparentTcp.available).toBe(false);
  });

  it("routes a namespace's TCP to its loopback port from outside it; a connection to the loopback stays as it is", async () => {
    // This host runs the executor's own tests as root with ip and nft (CI too): the probe must find it able.
    const status = probeTransparentTcp(null);
    expect(status.reason).toBeNull();
    const child = spawn('unshare', ['--user', '--map-root-user', '--net', process.execPath, '-e', INSIDE, '10123'], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    children.push(child);
    const lines: string[] = [];
    let waiter: (() => void) | null = null;
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      lines.push(...chunk.split('\n').filter(Boolean));
      waiter?.();
    });
    const line = async (n: number) => {
      while (lines.length < n) await new Promise<void>((resolve) => (waiter = resolve));
      return lines[n - 1];
    };
    expect(await line(1)).toBe('listening');
    // Before: nothing routes out of the namespace.
    child.stdin.write('203.0.113.7 80\n');
    expect(await line(2)).toBe('203.0.113.7 80 ENETUNREACH');
    await routeTransparentTcp(status.tools!, child.pid!, 10_123);
    child.stdin.write('203.0.113.7 80\n');
    expect(await line(3)).toBe('203.0.113.7 80 127.0.0.1:10123');
    child.stdin.write('2001:db8::7 443\n');
    // Redirected to ::1, where nothing listens in this namespace.
    expect(await line(4)).toBe('2001:db8::7 443 ECONNREFUSED');
    child.stdin.write('127.0.0.1 1\n');
    expect(await line(5)).toBe('127.0.0.1 1 ECONNREFUSED');
    child.stdin.end();
    await once(child, 'exit');
  });

  it("refuses, saying why, a process gone or one in the executor's own namespaces (never reroutes the host)", async () => {
    const status = probeTransparentTcp(null);
    const gone = spawn('true');
    await once(gone, 'exit');
    await expect(routeTransparentTcp(status.tools!, gone.pid!, 10_123)).rejects.toThrow(
      /the sandbox's user namespace cannot be opened/,
    );
    await expect(routeTransparentTcp(status.tools!, process.pid, 10_123)).rejects.toThrow(
      `process ${process.pid} is in the executor's own user namespace, not a sandbox's`,
    );
    // A user namespace of its own but the host's network: still refused.
    const userOnly = spawn('unshare', ['--user', '--map-root-user', 'sleep', '30']);
    children.push(userOnly as ChildProcessWithoutNullStreams);
    await waitForExec(userOnly.pid!, 'sleep');
    await expect(routeTransparentTcp(status.tools!, userOnly.pid!, 10_123)).rejects.toThrow(
      `process ${userOnly.pid} is in the executor's own net namespace, not a sandbox's`,
    );
    await expect(routeTransparentTcp(status.tools!, 1, 10_123)).rejects.toThrow(RangeError);
  });
});

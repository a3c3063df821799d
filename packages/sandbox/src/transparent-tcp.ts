/**
 * Transparent TCP inside a sandbox's network namespace (Codex's `networkProxyTransparentTcp`): the command's own
 * TCP to any address but the namespace's loopback is redirected to one port of the relay inside (the executor's
 * proxy-relay.ts), which reads where each connection was headed (`SO_ORIGINAL_DST`) and hands it to the managed
 * proxy's SOCKS5 policy. Codex builds a TUN device and a resolver for its helper; this uses the kernel's NAT:
 *
 * - `ip route add local 0.0.0.0/0 dev lo` (and `::/0`): every address is local, so a connect is not ENETUNREACH;
 * - an nftables `nat` `output` chain redirecting every TCP connection not to 127.0.0.0/8 or ::1 to the relay's
 *   port (the command's own loopback stays its own: a direct connect to 127.0.0.1 is refused as before), and DNS to
 *   the nameservers of /etc/resolv.conf to the same port, where the relay answers every name with an address of
 *   its own that stands for it (as Codex's resolver does).
 *
 * Both need CAP_NET_ADMIN in the sandbox's user namespace, and netlink, which the sandbox's seccomp filter
 * refuses: the executor, as the user namespace's owner, runs `ip` and `nft` there with `nsenter --user --net
 * --preserve-credentials` (the namespaces opened once, from the relay's pid) before the relay starts the command. The command has no capability (bubblewrap's
 * `--cap-drop ALL`) and no netlink socket, so it cannot undo them. A capability survives the exec of `ip` and
 * `nft` only for uid 0 inside, and bubblewrap maps the executor's own uid: the executor must run as root.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { closeSync, fstatSync, openSync, readFileSync, statSync } from 'node:fs';
import { isIP } from 'node:net';
import { findProgram, SBIN_DIRS } from './programs.js';

/** Whether this host can route a sandbox's TCP through the relay, and with which programs. */
export interface TransparentTcpStatus {
  available: boolean;
  /** Why not, and what to do, when it cannot. */
  reason: string | null;
  tools: TransparentTcpTools | null;
}

export interface TransparentTcpTools {
  nsenter: string;
  ip: string;
  nft: string;
}

/** The loopback up (bubblewrap has it so) and the routes that make every address local (`ip -batch`). */
export const TRANSPARENT_ROUTES = ['link set lo up', 'route add local 0.0.0.0/0 dev lo', 'route add local ::/0 dev lo'];

/**
 * The nftables ruleset that sends the namespace's TCP, loopback aside, to `port` on its loopback, and its DNS
 * (UDP port 53 to one of `nameservers`) to the same port (the relay's resolver).
 */
export function transparentTcpRules(port: number, nameservers: string[]): string {
  if (!Number.isSafeInteger(port) || port <= 0 || port > 0xffff) throw new RangeError(`not a port: ${port}`);
  const dns = (family: 4 | 6, match: string) => {
    const listed = nameservers.filter((address) => isIP(address) === family);
    return listed.length === 0 ? [] : [`    ${match} daddr { ${listed.join(', ')} } udp dport 53 redirect to :${port}`];
  };
  return [
    'table inet tether_transparent_tcp {',
    '  chain output {',
    '    type nat hook output priority -100; policy accept;',
    `    ip daddr != 127.0.0.0/8 meta l4proto tcp redirect to :${port}`,
    `    ip6 daddr != ::1 meta l4proto tcp redirect to :${port}`,
    ...dns(4, 'ip'),
    ...dns(6, 'ip6'),
    '  }',
    '}',
    '',
  ].join('\n');
}

/** The nameservers of a resolv.conf's text (IP literals, a zone dropped), else glibc's default, 127.0.0.1. */
export function resolvConfNameservers(text: string): string[] {
  const found: string[] = [];
  for (const line of text.split('\n')) {
    const m = /^\s*nameserver\s+([0-9A-Fa-f:.]+)(?:%\S*)?\s*$/.exec(line);
    if (m && isIP(m[1]!) !== 0 && !found.includes(m[1]!) && found.length < 8) found.push(m[1]!);
  }
  return found.length === 0 ? ['127.0.0.1'] : found;
}

/** The nameservers a sandbox's resolver asks (this host's /etc/resolv.conf, which the sandbox shows as it is). */
function nameservers(): string[] {
  try {
    return resolvConfNameservers(readFileSync('/etc/resolv.conf', 'utf8'));
  } catch {
    return resolvConfNameservers('');
  }
}

/**
 * Checks, once, what transparent TCP needs here: root, `nsenter`, `ip` and `nft`, and a kernel that lets a user
 * namespace's root add the routes and a NAT chain in a network namespace of its own (one `unshare` run of each,
 * a few ms). `sandboxReason`: why the sandbox itself is unavailable, if it is.
 */
export function probeTransparentTcp(sandboxReason: string | null): TransparentTcpStatus {
  const unavailable = (reason: string): TransparentTcpStatus => ({ available: false, reason, tools: null });
  if (sandboxReason !== null) return unavailable(`the sandbox is unavailable: ${sandboxReason}`);
  if (process.platform !== 'linux') return unavailable('transparent TCP needs Linux');
  if (process.geteuid?.() !== 0) {
    return unavailable(
      'the executor does not run as root: bubblewrap maps its own uid into the sandbox, and only uid 0 there keeps CAP_NET_ADMIN for the ip and nft it runs in the sandbox',
    );
  }
  const tools = {
    nsenter: findProgram('nsenter', SBIN_DIRS),
    ip: findProgram('ip', SBIN_DIRS),
    nft: findProgram('nft', SBIN_DIRS),
  };
  const missing = Object.entries(tools)
    .filter(([, path]) => path === null)
    .map(([name]) => name);
  if (missing.length > 0) {
    return unavailable(
      `${missing.join(', ')} not found on PATH (Debian/Ubuntu: apt-get install util-linux iproute2 nftables)`,
    );
  }
  const unshare = findProgram('unshare', SBIN_DIRS);
  if (unshare === null) return unavailable('unshare not found on PATH (util-linux), needed to check the kernel');
  const found = tools as TransparentTcpTools;
  for (const [program, args, input] of [
    [found.ip, ['-batch', '-'], TRANSPARENT_ROUTES.join('\n')],
    [found.nft, ['-f', '-'], transparentTcpRules(1, ['127.0.0.53', '::1'])],
  ] as const) {
    const run = spawnSync(unshare, ['--user', '--map-root-user', '--net', '--', program, ...args], {
      input,
      stdio: ['pipe', 'ignore', 'pipe'],
      timeout: 10_000,
    });
    if (run.error || run.status !== 0) {
      const stderr = run.stderr?.toString().trim().slice(0, 1000) || run.error?.message || `exit ${run.status}`;
      return unavailable(
        `the kernel refused ${program} in a user and network namespace of its own (${stderr}): nftables NAT must be allowed there`,
      );
    }
  }
  return { available: true, reason: null, tools: found };
}

/** The user and network namespaces held open (fds 3 and 4 of each nsenter): the ones `ip` and `nft` run in. */
type Namespaces = [user: number, net: number];

/**
 * Notes each child this spawns as the caller's own (an executor that adopts orphans must not reap it in their
 * stead: its exit would never reach its handle).
 */
export type NoteChild = (child: ChildProcess) => void;

/** Runs `program` in `namespaces`; rejects with its stderr when it fails. */
function inNamespaces(
  tools: TransparentTcpTools,
  namespaces: Namespaces,
  noteChild: NoteChild,
  program: string,
  args: string[],
  input: string,
) {
  return new Promise<void>((resolve, reject) => {
    const child = spawn(
      tools.nsenter,
      ['--user=/proc/self/fd/3', '--net=/proc/self/fd/4', '--preserve-credentials', '--', program, ...args],
      { stdio: ['pipe', 'ignore', 'pipe', ...namespaces], timeout: 10_000 },
    );
    noteChild(child);
    let stderr = '';
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      if (stderr.length < 2000) stderr += chunk;
    });
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(input);
    child.once('error', reject);
    child.once('close', (code, signal) => {
      if (code === 0) resolve();
      else reject(new Error(`${program} in the sandbox failed (${stderr.trim() || (signal ?? `exit ${code}`)})`));
    });
  });
}

/**
 * Sends the TCP of the network namespace `pid` is in (a sandbox's, as this process's PID namespace numbers it)
 * to `port` on that namespace's loopback. Its user and network namespaces are opened once and must both differ
 * from the executor's own (a pid gone and reused by a process of the host's namespaces is refused, never
 * rerouted); `ip` and `nft` run in those very namespaces. Rejects, saying why, when it cannot.
 */
export async function routeTransparentTcp(
  tools: TransparentTcpTools,
  pid: number,
  port: number,
  noteChild: NoteChild = () => undefined,
): Promise<void> {
  if (!Number.isSafeInteger(pid) || pid <= 1) throw new RangeError(`not a sandbox's pid: ${pid}`);
  const opened: number[] = [];
  try {
    for (const kind of ['user', 'net']) {
      let fd: number;
      try {
        fd = openSync(`/proc/${pid}/ns/${kind}`, 'r');
      } catch (err) {
        throw new Error(`the sandbox's ${kind} namespace cannot be opened: ${(err as Error).message}`);
      }
      opened.push(fd);
      const theirs = fstatSync(fd);
      const ours = statSync(`/proc/self/ns/${kind}`);
      if (theirs.ino === ours.ino && theirs.dev === ours.dev) {
        throw new Error(`process ${pid} is in the executor's own ${kind} namespace, not a sandbox's`);
      }
    }
    const namespaces = opened as Namespaces;
    await inNamespaces(tools, namespaces, noteChild, tools.ip, ['-batch', '-'], TRANSPARENT_ROUTES.join('\n'));
    const rules = transparentTcpRules(port, nameservers());
    await inNamespaces(tools, namespaces, noteChild, tools.nft, ['-f', '-'], rules);
  } finally {
    for (const fd of opened) closeSync(fd);
  }
}

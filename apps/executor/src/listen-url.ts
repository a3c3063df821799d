import { isIP } from 'node:net';

export type ListenTarget = { kind: 'websocket'; host: string; port: number } | { kind: 'stdio' };

export const DEFAULT_LISTEN_URL = 'ws://127.0.0.1:0';

export class ListenUrlError extends Error {
  override readonly name = 'ListenUrlError';
}

/**
 * Parses `--listen` (spec §1.1): `ws://IP:PORT` with a literal IP, `stdio` or `stdio://`; and, as every Tether
 * server takes its address, `IP:PORT` alone (`[IPv6]:PORT`) for the same WebSocket.
 */
export function parseListenUrl(text: string): ListenTarget {
  if (text === 'stdio' || text === 'stdio://') return { kind: 'stdio' };
  if (/^(\[[^\]]*\]|[^:/[\]]*):[^/:]*$/.test(text)) {
    try {
      return parseListenUrl(`ws://${text}`);
    } catch {
      throw new ListenUrlError(
        `invalid --listen address \`${text}\`; expected \`IP:PORT\`, \`ws://IP:PORT\` or \`stdio\``,
      );
    }
  }
  if (!text.startsWith('ws://')) {
    throw new ListenUrlError(`unsupported --listen URL \`${text}\`; expected \`ws://IP:PORT\` or \`stdio\``);
  }
  const invalid = () => new ListenUrlError(`invalid websocket --listen URL \`${text}\`; expected \`ws://IP:PORT\``);
  const authority = text.slice('ws://'.length);
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([0-9.]+)):(\d{1,5})$/.exec(authority);
  if (!match) throw invalid();
  const host = match[1] ?? match[2] ?? '';
  const port = Number(match[3]);
  if (isIP(host) === 0 || port > 65535) throw invalid();
  return { kind: 'websocket', host, port };
}

export function formatWebSocketUrl(host: string, port: number): string {
  return isIP(host) === 6 ? `ws://[${host}]:${port}` : `ws://${host}:${port}`;
}

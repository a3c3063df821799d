import { describe, expect, it } from 'vitest';
import { formatWebSocketUrl, parseListenUrl } from './listen-url.js';

describe('parseListenUrl', () => {
  it('accepts ws://IP:PORT, stdio and stdio://', () => {
    expect(parseListenUrl('ws://127.0.0.1:0')).toEqual({ kind: 'websocket', host: '127.0.0.1', port: 0 });
    expect(parseListenUrl('ws://[::1]:8080')).toEqual({ kind: 'websocket', host: '::1', port: 8080 });
    expect(parseListenUrl('stdio')).toEqual({ kind: 'stdio' });
    expect(parseListenUrl('stdio://')).toEqual({ kind: 'stdio' });
  });

  it('accepts IP:PORT as every Tether server does, for the same WebSocket', () => {
    expect(parseListenUrl('127.0.0.1:8765')).toEqual({ kind: 'websocket', host: '127.0.0.1', port: 8765 });
    expect(parseListenUrl('[::1]:0')).toEqual({ kind: 'websocket', host: '::1', port: 0 });
    for (const bad of ['localhost:1234', '127.0.0.1:', '127.0.0.1:70000', '[::1]:x']) {
      expect(() => parseListenUrl(bad), bad).toThrow(
        `invalid --listen address \`${bad}\`; expected \`IP:PORT\`, \`ws://IP:PORT\` or \`stdio\``,
      );
    }
  });

  it('rejects hostnames with the Codex message', () => {
    expect(() => parseListenUrl('ws://localhost:1234')).toThrow(
      'invalid websocket --listen URL `ws://localhost:1234`; expected `ws://IP:PORT`',
    );
  });

  it('rejects other schemes with the Codex message', () => {
    expect(() => parseListenUrl('http://127.0.0.1:1234')).toThrow(
      'unsupported --listen URL `http://127.0.0.1:1234`; expected `ws://IP:PORT` or `stdio`',
    );
  });

  it('rejects missing or out-of-range ports and paths', () => {
    for (const bad of ['ws://127.0.0.1', 'ws://127.0.0.1:70000', 'ws://127.0.0.1:80/x', 'ws://1.2.3:80']) {
      expect(() => parseListenUrl(bad)).toThrow(/invalid websocket --listen URL/);
    }
  });

  it('formats IPv6 hosts in brackets', () => {
    expect(formatWebSocketUrl('::1', 5)).toBe('ws://[::1]:5');
    expect(formatWebSocketUrl('127.0.0.1', 5)).toBe('ws://127.0.0.1:5');
  });
});

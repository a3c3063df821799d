// The SOCKS5 client side of the sandbox relay's transparent TCP (proxy-relay.ts): a connection the namespace's
// NAT redirected to the relay is handed to the managed proxy's SOCKS5 listener (network-proxy.ts `onSocks`) as a
// CONNECT to where it was headed, so that it is decided as `socks5_tcp`, as Codex's are.

import { isIPv4, isIPv6, type Socket } from 'node:net';

/** The 16 bytes of an IPv6 address in text (a `::` run, an embedded IPv4 tail). */
export function ipv6Bytes(text: string): Buffer {
  if (!isIPv6(text)) throw new TypeError(`not an IPv6 address: ${text}`);
  const groups = (part: string) => {
    const out: number[] = [];
    for (const piece of part === '' ? [] : part.split(':')) {
      if (piece.includes('.')) {
        const [a, b, c, d] = piece.split('.').map(Number) as [number, number, number, number];
        out.push((a << 8) | b, (c << 8) | d);
      } else out.push(Number.parseInt(piece, 16));
    }
    return out;
  };
  const [head = '', tail] = text.split('::');
  const front = groups(head);
  const back = tail === undefined ? [] : groups(tail);
  const all = [...front, ...Array(8 - front.length - back.length).fill(0), ...back];
  const bytes = Buffer.alloc(16);
  for (const [i, group] of all.entries()) bytes.writeUInt16BE(group, i * 2);
  return bytes;
}

/**
 * The greeting (no authentication) and CONNECT request for `address` (an IP literal, or a name of at most 255
 * bytes, sent as one) and `port`.
 */
export function socksConnectRequest(address: string, port: number): Buffer {
  let target: Buffer;
  if (isIPv4(address)) target = Buffer.from([1, ...address.split('.').map(Number)]);
  else if (isIPv6(address)) target = Buffer.concat([Buffer.from([4]), ipv6Bytes(address)]);
  else {
    const name = Buffer.from(address, 'latin1');
    if (name.length === 0 || name.length > 255) throw new RangeError(`not a SOCKS5 name: ${address}`);
    target = Buffer.concat([Buffer.from([3, name.length]), name]);
  }
  return Buffer.concat([Buffer.from([5, 1, 0, 5, 1, 0]), target, Buffer.from([port >> 8, port & 0xff])]);
}

/** Bytes a SOCKS5 server sends before the stream: its method choice and its reply, at most 2 + 262. */
const MAX_ANSWER = 264;

/**
 * Asks the SOCKS5 server at the other end of `upstream` to connect to `address` (or a name):`port`. Resolves with the bytes
 * that followed the server's reply (the start of the stream) when it succeeded (reply 0), null when it refused
 * (any other method or reply, a malformed or overlong answer, or the connection's end before it). `upstream` is
 * left paused with no listener of this function's.
 */
export function socksConnect(upstream: Socket, address: string, port: number): Promise<Buffer | null> {
  return new Promise((resolve) => {
    let answer = Buffer.alloc(0);
    const finish = (result: Buffer | null) => {
      upstream.off('data', onData).off('close', onClose).off('error', onClose);
      upstream.pause();
      resolve(result);
    };
    const onClose = () => finish(null);
    const onData = (chunk: Buffer) => {
      answer = Buffer.concat([answer, chunk]);
      if (answer.length >= 2 && (answer[0] !== 5 || answer[1] !== 0)) return finish(null);
      if (answer.length < 2 + 5) return answer.length > MAX_ANSWER ? finish(null) : undefined;
      const reply = answer.subarray(2);
      if (reply[0] !== 5 || reply[1] !== 0) return finish(null);
      const type = reply[3];
      const length = type === 1 ? 4 : type === 4 ? 16 : type === 3 ? 1 + reply[4]! : -1;
      if (length < 0) return finish(null);
      if (reply.length < 4 + length + 2) return answer.length > MAX_ANSWER ? finish(null) : undefined;
      finish(Buffer.from(reply.subarray(4 + length + 2)));
    };
    upstream.on('data', onData).on('close', onClose).on('error', onClose);
    upstream.write(socksConnectRequest(address, port));
    upstream.resume();
  });
}

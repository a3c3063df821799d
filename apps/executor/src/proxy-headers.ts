// The hop-by-hop headers a proxy drops when it forwards a request: the managed proxy's plain HTTP requests
// (network-proxy.ts) and the requests it intercepts for credential masking (credential-masking.ts).

/** Request headers a proxy does not pass on (hop-by-hop). */
export const HOP_BY_HOP = new Set([
  'connection',
  'proxy-connection',
  'keep-alive',
  'proxy-authorization',
  'proxy-authenticate',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

export function forwardedHeaders(raw: string[]): [string, string][] {
  const out: [string, string][] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    if (!HOP_BY_HOP.has(raw[i]!.toLowerCase())) out.push([raw[i]!, raw[i + 1]!]);
  }
  return out;
}

import { isLoopbackHost } from '@tether/exec-protocol';
import { describeProxy, ProxyConfigError, type ProxySettings, proxyFor, proxySettingsFromEnv } from '@tether/outbound';
import { TetherError } from './errors.js';

/** The proxies a connection uses: the caller's, else the environment's (a malformed variable is a usage error). */
export function proxySettings(options: { proxy?: ProxySettings }): ProxySettings {
  if (options.proxy) return options.proxy;
  try {
    return proxySettingsFromEnv();
  } catch (err) {
    if (err instanceof ProxyConfigError) throw new TetherError('invalid_argument', err.message);
    throw err;
  }
}

/**
 * The proxy for `target`, or null. A plain http:// or ws:// target is allowed on loopback because its
 * credentials (the API key and bundle, the relay's signed URL) stay on this machine; a proxy elsewhere would
 * read them in clear, so that needs the same explicit consent as a remote plain target (`allowInsecure`).
 * `what` names the target and its credential for the refusal.
 */
export function proxyForCredentials(
  target: URL,
  proxies: ProxySettings,
  allowInsecure: boolean,
  what: { target: string; secret: string; secure: string },
): URL | null {
  const proxy = proxyFor(target, proxies);
  const plain = target.protocol === 'http:' || target.protocol === 'ws:';
  if (proxy && plain && !allowInsecure && !isLoopbackHost(proxy.hostname)) {
    throw new TetherError(
      'invalid_argument',
      `refusing to ${what.target} through the proxy ${describeProxy(proxy)}: the proxy would read ${what.secret} ` +
        `in clear. Use ${what.secure}, exempt it with NO_PROXY, or allow it explicitly ` +
        '(allowInsecureRegistry / --allow-insecure-registry)',
    );
  }
  return proxy;
}

import { ProxyConfigError, type ProxySettings, proxySettingsFromEnv } from '@tether/outbound';
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

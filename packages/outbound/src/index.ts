export { outboundFetch } from './fetch.js';
export {
  DIRECT,
  describeProxy,
  NoProxy,
  ProxyConfigError,
  type ProxyEnv,
  type ProxySettings,
  proxyAuthorization,
  proxyFor,
  proxySettingsFromEnv,
  tunnelAgent,
  webSocketAgent,
} from './proxy.js';
export { type OutboundRequestOptions, outboundRequest } from './request.js';

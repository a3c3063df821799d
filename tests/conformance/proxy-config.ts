/**
 * The `networkProxy` of a `process/start` as Codex's agent sends it (`RemoteNetworkProxyLaunchConfig`), `overrides`
 * applied to its `proxy` and `launch` to the rest: for the managed-proxy conformance tests.
 */
export const proxyConfig = (overrides: Record<string, unknown>, launch: Record<string, unknown> = {}) => ({
  proxy: {
    enabled: true,
    // Without a SOCKS5 listener ALL_PROXY names the HTTP one (the SOCKS5 case turns it on).
    enableSocks5: false,
    enableSocks5Udp: false,
    allowUpstreamProxy: true,
    dangerouslyAllowAllUnixSockets: false,
    mode: 'full',
    domains: null,
    unixSockets: null,
    allowLocalBinding: false,
    ...overrides,
  },
  auditMetadata: { conversationId: 'conformance', appVersion: '0.171.0', originator: 'codex_exec' },
  environmentId: 'remote',
  executionId: 'execution-1',
  ...launch,
});

/**
 * The Node entry of @tether/client: the browser entry (browser.ts) plus what needs Node: this machine's
 * processes and files, executors on stdio or a plain WebSocket, Node's rendezvous platform (`ws`, proxies,
 * node:http, node:crypto), TCP forwarding, file streams, sandbox profiles and socket transports.
 */
export * from './browser.js';
// Node's versions of these, where the browser entry has platform-free ones of the same name:
export { Environment, type SpawnOptions } from './environment-node.js';
export { ExecServerClient, type InitializeInfo } from './exec-client-node.js';
// Node only:
export { LocalBackend } from './local-backend.js';
export { LocalFs } from './local-fs.js';
export { fetchBundle } from './registry-node.js';
export { RemoteFs } from './remote-fs-node.js';
export { rendezvousDialer } from './rendezvous-node.js';
export { type SandboxMode, type SandboxProfileOptions, sandboxProfile } from './sandbox.js';
export {
  MAX_SOCKET_MESSAGE_BYTES,
  SocketMessageTransport,
  type SocketMessageTransportOptions,
} from './socket-transport.js';
export {
  type ConnectTcpOptions,
  TCP_FORWARD_CAPABILITY,
  TcpConnectError,
  TcpConnection,
  type TcpDuplex,
  TcpForwarder,
} from './tcp.js';

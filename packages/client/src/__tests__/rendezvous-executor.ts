import { type PeerHandle, startPeer, startTestRendezvous, type TestRendezvous } from '@tether/test-kit';
import { afterAll, beforeAll } from 'vitest';

/**
 * A test registry and relay with one of our executors registered on it as `environmentId`, for the enclosing
 * describe block: started before its tests, closed after them. `rig` is set once it has started.
 */
export function executorOnRendezvous(environmentId: string): { rig: TestRendezvous } {
  const stack = {} as { rig: TestRendezvous };
  let peer: PeerHandle | undefined;
  beforeAll(async () => {
    stack.rig = await startTestRendezvous();
    peer = await startPeer({
      kind: 'tether',
      transport: 'remote',
      args: ['--registry', stack.rig.registryUrl, '--environment-id', environmentId],
      env: { TETHER_EXECUTOR_API_KEY: stack.rig.apiKey },
    });
    await stack.rig.environmentOnline(environmentId);
  });
  afterAll(async () => {
    await peer?.close();
    await stack.rig?.close();
  });
  return stack;
}

/**
 * The two shapes a reliability suite's stack takes, each with the leak checks around it: a fresh stack in every
 * test (kill, relay-failover), or one stack and executor for the whole suite (chaos, load).
 */
import type { Environment } from '@tether/client';
import { type PeerHandle, type Stack, type StackOptions, startStack } from '@tether/test-kit';
import { afterAll, afterEach, beforeAll } from 'vitest';
import {
  type ConnectOptions,
  connect,
  type ExecutorResources,
  executorResources,
  expectExecutorBack,
  expectLocalResourcesBack,
  expectRelayIdle,
  type LocalResources,
  localResources,
} from './support.ts';

/**
 * For a suite that starts a stack of its own in each test: the stack and the Environments a test kept are
 * closed after it, and after the suite this process must hold no more sockets, TCP handles or children than
 * before it.
 */
export function useStackPerTest(): { start: (options?: StackOptions) => Promise<Stack>; envs: Environment[] } {
  let baseline: LocalResources;
  let stack: Stack | undefined;
  /** What the test connected: closed after it. */
  const envs: Environment[] = [];

  beforeAll(() => {
    baseline = localResources();
  });

  afterEach(async () => {
    for (const env of envs.splice(0)) await env.close();
    await stack?.close();
    stack = undefined;
  });

  afterAll(async () => {
    await expectLocalResourcesBack(baseline);
  });

  return {
    /** Starts this test's stack, closed after it. */
    start: async (options?: StackOptions) => {
      stack = await startStack(options);
      return stack;
    },
    envs,
  };
}

/**
 * One stack and one executor for a whole suite, with what its leak checks compare against: this process's
 * resources before the stack, and this process's and the executor's once both are up and idle. Environments
 * are connected through `connect`, which tracks each attempt, so that one arriving after a deadline is still
 * closed at the end.
 */
export class SuiteStack {
  stack!: Stack;
  executor!: PeerHandle;
  /** The Environments connected and not yet closed. */
  readonly envs: Environment[] = [];
  private readonly pending: Array<Promise<Environment>> = [];
  private beforeStack!: LocalResources;
  private idleLocal!: LocalResources;
  private idleExecutor!: ExecutorResources;

  /** Starts the stack (`start`) and an executor for `environmentId`, and takes the baselines. */
  async start(environmentId: string, start: () => Promise<Stack>): Promise<void> {
    this.beforeStack = localResources();
    this.stack = await start();
    this.executor = await this.stack.startExecutor('tether', environmentId);
    this.idleLocal = localResources();
    this.idleExecutor = executorResources(this.executor.pid, this.stack.registry.port);
  }

  /** `connect` on this stack, tracked. */
  connect(options: Omit<ConnectOptions, 'stack'>): Promise<Environment> {
    const attempt = connect({ stack: this.stack, ...options });
    this.pending.push(attempt);
    return attempt.then((env) => {
      this.envs.push(env);
      return env;
    });
  }

  /**
   * The suite's last check, `label` naming it in the log: with every Environment closed, the relay counts no
   * stream, the executor is back to its idle processes and descriptors (within `executorTimeoutMs`), and this
   * process holds no more than when the stack was up.
   */
  async expectIdle(label: string, executorTimeoutMs?: number): Promise<void> {
    for (const env of this.envs.splice(0)) await env.close();
    await expectRelayIdle(this.stack);
    const after = await expectExecutorBack(
      this.executor.pid,
      this.stack.registry.port,
      this.idleExecutor,
      executorTimeoutMs === undefined ? {} : { timeoutMs: executorTimeoutMs },
    );
    console.log(
      `${label}: executor idle ${JSON.stringify(this.idleExecutor)}, after ${JSON.stringify(after)} ` +
        `(${after.registrySockets} idle keep-alive connections to the registry, not counted)`,
    );
    await expectLocalResourcesBack(this.idleLocal);
  }

  /**
   * After the suite: every Environment closed (connects still under way given up to 30 s to settle), then the
   * stack by `closeStack`, and this process back at its resources from before the stack.
   */
  async close(closeStack: () => Promise<void> = async () => this.stack?.close()): Promise<void> {
    const late = await Promise.race([
      Promise.allSettled(this.pending),
      new Promise<PromiseSettledResult<Environment>[]>((resolve) => setTimeout(() => resolve([]), 30_000)),
    ]);
    for (const result of late)
      if (result.status === 'fulfilled' && !this.envs.includes(result.value)) this.envs.push(result.value);
    for (const env of this.envs.splice(0)) await env.close();
    await closeStack();
    await expectLocalResourcesBack(this.beforeStack);
  }
}

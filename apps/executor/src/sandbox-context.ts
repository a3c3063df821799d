/**
 * A request's `sandbox` as the executor's handlers take it: decoded (a malformed one is -32602), then
 * prepared by the Sandboxer, whose refusals become the RpcError the calling method answers with.
 */
import { DecodeError, decodeSandboxContext, RpcError, type SandboxContext } from '@tether/exec-protocol';
import { type PreparedSandbox, type Sandboxer, SandboxPolicyError, SandboxUnavailableError } from '@tether/sandbox';

/** The decoded `sandbox` of a call (null for none); a malformed one is invalid params. */
export function decodeSandbox(raw: unknown): SandboxContext | null {
  try {
    return decodeSandboxContext(raw);
  } catch (err) {
    if (err instanceof DecodeError) throw RpcError.invalidParams(err.message);
    throw err;
  }
}

/**
 * `sandbox.prepare`, with its refusals made RpcErrors by `refuse`: a policy error as it is worded, a sandbox
 * this host cannot enforce as `<what> cannot be enforced on this executor: <why>`.
 */
export async function prepareSandbox(
  sandbox: Sandboxer,
  context: SandboxContext,
  options: Parameters<Sandboxer['prepare']>[1],
  what: string,
  refuse: (message: string) => RpcError,
): Promise<PreparedSandbox> {
  try {
    return await sandbox.prepare(context, options);
  } catch (err) {
    if (err instanceof SandboxUnavailableError) {
      throw refuse(`${what} cannot be enforced on this executor: ${err.message}`);
    }
    if (err instanceof SandboxPolicyError) throw refuse(err.message);
    throw err;
  }
}

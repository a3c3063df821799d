/**
 * The fs helper: run by the executor inside bubblewrap for an `fs/*` call under a restricted sandbox, one
 * call per run. Reads `{op, args}` (JSON) from stdin, runs it (confined-ops.ts), and writes one line:
 * `{"ok": result}` or `{"error": {code, message, data?}}`. Whatever the policy denies fails here, in the
 * kernel, with the OS error the call would have had.
 */
import { RpcError } from '@tether/exec-protocol';
import { type ConfinedOp, runConfinedOp } from './confined-ops.js';
import { fsError } from './os-error.js';

const chunks: Buffer[] = [];
for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
let answer: unknown;
try {
  const request = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { op: ConfinedOp; args: never };
  answer = { ok: await runConfinedOp(request.op, request.args) };
} catch (err) {
  const error = RpcError.is(err) ? err : fsError(err);
  answer = {
    error: { code: error.code, message: error.message, ...(error.data === undefined ? {} : { data: error.data }) },
  };
}
process.stdout.write(`${JSON.stringify(answer)}\n`);

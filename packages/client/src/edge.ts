/**
 * What an executor sends, checked at the edge before any of it is used (an executor is untrusted input): each
 * answer against its method's result schema, each process notification against its own.
 */
import {
  DecodeError,
  decodeResult,
  isNotification,
  type MethodResult,
  Notification,
  type RequestMethod,
} from '@tether/exec-protocol';
import { attachmentOf, takeAttachmentRelease } from '@tether/jsonrpc';
import type { ProcessEvent } from './backend.js';
import { TetherError } from './errors.js';

/**
 * `answer` as `method`'s result, or a `protocol` TetherError naming the method and what is wrong: every answer is
 * checked against the protocol's schema before any of it is used (an executor is untrusted input).
 */
export function decodeAnswer<M extends RequestMethod>(method: M, answer: unknown): MethodResult<M> {
  try {
    return decodeResult(method, answer);
  } catch (err) {
    if (err instanceof DecodeError) {
      throw new TetherError(
        'protocol',
        `the executor answered ${method} with something that is not its result: ${err.message}`,
        {
          cause: err,
        },
      );
    }
    throw err;
  }
}

/**
 * The process event a notification carries, or null for one that is not a process event or is malformed (it is
 * dropped: a process handle finds any gap it leaves and reads it with process/read).
 */
export function processEventOf(method: string, params: unknown): ProcessEvent | null {
  switch (method) {
    case Notification.processOutput: {
      if (!isNotification(Notification.processOutput, params)) return null;
      // Raw bytes (`binaryOutput`) are the attachment, handed on with its release (ProcessEvent); else base64.
      const attachment = attachmentOf(params);
      const chunk = attachment ?? (params.chunk === undefined ? null : Buffer.from(params.chunk, 'base64'));
      if (chunk === null) return null;
      const release = attachment === undefined ? undefined : takeAttachmentRelease(params);
      return {
        kind: 'output',
        processId: params.processId,
        seq: params.seq,
        stream: params.stream,
        chunk,
        ...(release === undefined ? {} : { release }),
      };
    }
    case Notification.processExited:
      if (!isNotification(Notification.processExited, params)) return null;
      return { kind: 'exited', processId: params.processId, seq: params.seq, exitCode: params.exitCode };
    case Notification.processClosed:
      if (!isNotification(Notification.processClosed, params)) return null;
      return { kind: 'closed', processId: params.processId, seq: params.seq };
    default:
      return null;
  }
}

import { createServer } from 'node:http';

/**
 * A scripted model behind a Responses API endpoint on 127.0.0.1:0, for driving the real `codex exec`
 * agent without a network: each `POST /v1/responses` is answered, as a server-sent event stream, with
 * the next turn of the script — a `function_call` of one of the tools the request offers, or the final
 * assistant message. Every request body is kept, so a test reads exactly what the agent sent the model
 * (the `function_call_output` of each tool call).
 */
export type MockTurn =
  | { type: 'call'; name: string; arguments: Record<string, unknown> }
  | { type: 'message'; text: string };

/** What a turn can depend on: the outputs of the tool calls made so far, oldest first. */
export type MockScriptStep = MockTurn | ((toolOutputs: readonly string[]) => MockTurn);

export interface MockResponsesRequest {
  path: string;
  body: Record<string, unknown>;
}

export interface MockResponses {
  /** `http://127.0.0.1:PORT/v1`, the provider's `base_url`. */
  readonly baseUrl: string;
  readonly requests: readonly MockResponsesRequest[];
  /** The `function_call_output` texts of the last request (every tool call's result, oldest first). */
  toolOutputs(): string[];
  /** Names of the function tools the first request offered. */
  offeredTools(): string[];
  /** `config.toml` for a `CODEX_HOME` that points the agent at this server, with no approvals or sandbox. */
  codexConfig(): string;
  close(): Promise<void>;
}

const MAX_BODY_BYTES = 64 * 1024 * 1024;

function outputsOf(body: Record<string, unknown> | undefined): string[] {
  const input = Array.isArray(body?.input) ? (body.input as Record<string, unknown>[]) : [];
  return input
    .filter((item) => item?.type === 'function_call_output')
    .map((item) => (typeof item.output === 'string' ? item.output : JSON.stringify(item.output)));
}

export async function startMockResponses(script: readonly MockScriptStep[]): Promise<MockResponses> {
  const requests: MockResponsesRequest[] = [];
  let turns = 0;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_BODY_BYTES) chunks.push(chunk);
    });
    req.on('end', () => {
      const path = (req.url ?? '/').split('?')[0]!;
      if (req.method !== 'POST' || !path.endsWith('/responses') || size > MAX_BODY_BYTES) {
        res.writeHead(404).end();
        return;
      }
      let body: Record<string, unknown>;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
      } catch {
        res.writeHead(400).end();
        return;
      }
      requests.push({ path, body });
      const n = ++turns;
      const step = script[n - 1] ?? { type: 'message', text: 'script finished' };
      const turn = typeof step === 'function' ? step(outputsOf(body)) : step;
      const item =
        turn.type === 'call'
          ? {
              type: 'function_call',
              id: `fc_${n}`,
              call_id: `call_${n}`,
              name: turn.name,
              arguments: JSON.stringify(turn.arguments),
            }
          : {
              type: 'message',
              role: 'assistant',
              id: `msg_${n}`,
              content: [{ type: 'output_text', text: turn.text }],
            };
      const id = `resp_${n}`;
      const event = (type: string, data: Record<string, unknown>) =>
        res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      event('response.created', { response: { id } });
      event('response.output_item.done', { item });
      event('response.completed', {
        response: { id, usage: { input_tokens: 1, output_tokens: 1, total_tokens: 2 } },
      });
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('mock model has no TCP address');
  const baseUrl = `http://127.0.0.1:${address.port}/v1`;
  return {
    baseUrl,
    requests,
    toolOutputs: () => outputsOf(requests.at(-1)?.body),
    offeredTools: () => {
      const tools = Array.isArray(requests[0]?.body.tools) ? (requests[0].body.tools as Record<string, unknown>[]) : [];
      return tools.filter((t) => t.type === 'function').map((t) => String(t.name));
    },
    codexConfig: () =>
      [
        'model = "mock-model"',
        'model_provider = "mock"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        '[model_providers.mock]',
        'name = "mock"',
        `base_url = "${baseUrl}"`,
        'wire_api = "responses"',
        'request_max_retries = 0',
        'stream_max_retries = 0',
        '',
      ].join('\n'),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

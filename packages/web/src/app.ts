import type { Environment } from '@tether/client/browser';
import { connectFromBrowser } from './connect.js';
import { element } from './dom.js';
import { type FilesPanel, mountFiles } from './files.js';
import { mountProcesses, type ProcessesPanel } from './processes.js';
import { SharedView } from './shared.js';
import { exchangeGrant, readHashParams, type SignIn, signInStore } from './sign-in.js';
import { LOGIN_SHELL, TerminalSession } from './terminal.js';

type PageState = 'signed-out' | 'connecting' | 'connected' | 'reconnecting' | 'lost' | 'error';

const form = element<HTMLFormElement>('signin');
const environmentInput = element<HTMLInputElement>('environment');
const keyInput = element<HTMLInputElement>('api-key');
const rememberInput = element<HTMLInputElement>('remember');
const commandInput = element<HTMLInputElement>('command');
const status = element<HTMLElement>('status');
const exitStatus = element<HTMLElement>('exit-status');
const terminalElement = element<HTMLElement>('terminal');
const workspace = element<HTMLElement>('workspace');

let state: PageState = 'signed-out';
let session: TerminalSession | null = null;
let environment: Environment | null = null;
let files: FilesPanel | null = null;
let processes: ProcessesPanel | null = null;
let shared: SharedView | null = null;

function setState(next: PageState, text: string): void {
  state = next;
  status.dataset.state = next;
  status.textContent = text;
}

/** Test and diagnostics hook: what the page shows, read by the browser tests. */
const hook = {
  terminalText: () => session?.text() ?? '',
  state: () => state,
  size: () => {
    const size = session?.size ?? { rows: 0, cols: 0 };
    return { rows: size.rows, cols: size.cols };
  },
  echoLatencies: () => session?.echoLatencies() ?? [],
  transfers: () => files?.transfers() ?? [],
  refreshProcesses: () => processes?.refresh() ?? Promise.resolve(),
  attachedText: () => processes?.attachedText() ?? '',
  sharedText: () => shared?.text() ?? '',
  sharedState: () => shared?.state() ?? null,
  participants: () => shared?.participants() ?? [],
};
(globalThis as unknown as { tether: typeof hook }).tether = hook;

/** WebCrypto (records, ids, hashes) exists only in a secure context: https://, or http:// on localhost. */
const INSECURE_CONTEXT =
  'this page needs a secure context for WebCrypto: open it over https://, or on localhost / 127.0.0.1';

/**
 * Connects and opens the terminal and panels; with `share` (a share link's process and token), only that process,
 * watched (and controlled, where the share allows) in the shared view.
 */
async function connect(signIn: SignIn, share?: { processId: string; token: string }): Promise<void> {
  if (!isSecureContext) {
    setState('error', INSECURE_CONTEXT);
    return;
  }
  setState('connecting', `connecting to ${signIn.environmentId}…`);
  form.querySelector('fieldset')?.setAttribute('disabled', '');
  try {
    const env = await connectFromBrowser({
      registryUrl: location.origin,
      environmentId: signIn.environmentId,
      credential: signIn.credential,
      onStatus: (change, detail) => {
        if (change === 'disconnected') setState('reconnecting', `connection lost, resuming: ${detail}`);
        else if (change === 'reconnected') setState('connected', `connected to ${signIn.environmentId}`);
        else setState('lost', `session lost: ${detail}`);
      },
    });
    environment = env;
    form.hidden = true;
    if (share !== undefined) {
      setState('connected', `watching process ${share.processId} on ${signIn.environmentId}`);
      shared = new SharedView(share.processId, {
        onEnded: (reason) => setState('lost', `the shared process is gone to this page: ${reason}`),
      });
      await shared.start(env, share.token);
      return;
    }
    setState('connected', `connected to ${signIn.environmentId}`);
    workspace.hidden = false;
    processes = mountProcesses(env);
    files = mountFiles(env);
    const command = commandInput.value.trim();
    const argv = command === '' ? LOGIN_SHELL : ['/bin/sh', '-c', command];
    session = new TerminalSession(terminalElement, {
      onExit: (exitCode) => {
        exitStatus.dataset.exitCode = String(exitCode);
        exitStatus.textContent = `process exited with code ${exitCode}`;
      },
      onError: (error) => setState('error', error.message),
    });
    await session.start(env, argv);
  } catch (err) {
    setState('error', (err as Error).message);
    form.querySelector('fieldset')?.removeAttribute('disabled');
    await environment?.close().catch(() => undefined);
    environment = null;
  }
}

form.addEventListener('submit', (event) => {
  event.preventDefault();
  const environmentId = environmentInput.value.trim();
  const credential = keyInput.value.trim();
  if (environmentId === '' || credential === '') {
    setState('error', 'an environment id and an API key are needed');
    return;
  }
  // The key stays in this page's memory; in session storage only when asked (gone when the tab closes).
  if (rememberInput.checked) signInStore.save({ environmentId, credential });
  else signInStore.clear();
  keyInput.value = '';
  void connect({ environmentId, credential });
});

addEventListener('pagehide', () => {
  session?.dispose();
  shared?.dispose();
  void environment?.close();
});

async function boot(): Promise<void> {
  const params = readHashParams(location.hash);
  // The grant must not stay in the address bar or the history once read.
  if (params.grant !== undefined) history.replaceState(null, '', `${location.pathname}${location.search}`);
  if (params.env !== undefined) environmentInput.value = params.env;
  if (!isSecureContext) {
    // Said before a grant is spent on a session this page could not use.
    setState('error', INSECURE_CONTEXT);
    return;
  }
  if (params.grant !== undefined) {
    const share =
      params.process !== undefined && params.share !== undefined
        ? { processId: params.process, token: params.share }
        : undefined;
    setState('connecting', share ? 'opening the share link…' : 'exchanging the sign-in link…');
    try {
      const exchanged = await exchangeGrant(location.origin, params.grant);
      if (exchanged.shareAccess !== undefined && share === undefined) {
        throw new Error('this share link names no process: copy the whole link that harness share printed');
      }
      await connect(exchanged, share);
    } catch (err) {
      setState('error', (err as Error).message);
    }
    return;
  }
  const saved = signInStore.load();
  if (saved && (params.env === undefined || params.env === saved.environmentId)) {
    environmentInput.value = saved.environmentId;
    rememberInput.checked = true;
    await connect(saved);
    return;
  }
  setState('signed-out', 'signed out');
}

void boot();

// Drives the real AI SDK chat client (ai 6 or ai 7) against a running gateway.
//
//   node driver.mjs < scenario.json        (or: node driver.mjs scenario.json)
//
// Prints one JSON result on stdout. Exit code 0 when a result was printed (check
// `ok`), 2 when the scenario itself is invalid. See README.md for the format.
import { readFileSync } from 'node:fs';
import { register } from 'node:module';
import { pathToFileURL, fileURLToPath } from 'node:url';
import path from 'node:path';
import WebSocket from 'ws';
import { Recorder } from './recorder.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const WEB_SRC = path.resolve(HERE, '../../web/src');
const WS6_DIR = path.resolve(HERE, '../../web/ws-transport');
const DEFAULT_WS6_MODULE = path.join(WS6_DIR, 'ws-transport.js');
const PAGE_PREDICATE_MODULE = path.join(WEB_SRC, 'predicates.js');

const KINDS = {
  sse6: { pkg: 'ai6', transport: 'sse' },
  sse7: { pkg: 'ai7', transport: 'sse' },
  ws: { pkg: 'ai7', transport: 'ws' },
  ws7: { pkg: 'ai7', transport: 'ws' },
  ws6: { pkg: 'ai6', transport: 'ws6' },
};

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

class ScenarioError extends Error {}

// ---------------------------------------------------------------------------
// A headless chat: AbstractChat with in-memory state, like the SDK's own tests
// and like @ai-sdk/react's ReactChatState (snapshots on write).

class MemoryChatState {
  constructor(messages = []) {
    this.status = 'ready';
    this.error = undefined;
    this.messages = messages;
  }

  snapshot = value => structuredClone(value);

  pushMessage = message => {
    this.messages = this.messages.concat(this.snapshot(message));
  };

  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };

  replaceMessage = (index, message) => {
    this.messages = [
      ...this.messages.slice(0, index),
      this.snapshot(message),
      ...this.messages.slice(index + 1),
    ];
  };
}

function headlessChatClass(AbstractChat) {
  return class HeadlessChat extends AbstractChat {
    constructor({ messages, ...init }) {
      super({ ...init, state: new MemoryChatState(messages) });
    }
  };
}

// ---------------------------------------------------------------------------

function toolNameOf(part) {
  if (part.type === 'dynamic-tool') return part.toolName;
  return part.type.startsWith('tool-') ? part.type.slice('tool-'.length) : undefined;
}

function toolParts(messages, toolCallId) {
  return messages.flatMap(m =>
    m.parts.filter(p => toolNameOf(p) !== undefined && p.toolCallId === toolCallId),
  );
}

class Run {
  constructor(scenario, ai, { WsTransport6, pagePredicate } = {}, { name = 'main', main = null } = {}) {
    this.scenario = scenario;
    this.ai = ai;
    this.modules = { WsTransport6, pagePredicate };
    this.name = name;
    this.main = main ?? this;
    this.peers = new Map(); // name -> Run: more chat clients in the same scenario (main run only)
    this.kind = KINDS[scenario.kind];
    this.started = Date.now();
    this.inflight = new Set();
    this.driverErrors = [];
    this.toolCalls = [];
    this.finishes = [];
    this.ranTools = new Set();
    this.http = []; // results of `http` steps
    this.recorder = new Recorder({
      schema: ai.asSchema(ai.uiMessageChunkSchema),
      maxRequests: scenario.maxRequests ?? 10,
      includeChunks: scenario.includeChunks ?? true,
    });
    this.recorder.onLoop = () => {
      // Stop whatever is running; the guard already refused the extra request.
      setTimeout(() => this.chat.stop().catch(() => {}), 0);
    };

    const transport = this.makeTransport(WsTransport6);
    this.transport = transport;
    const Chat = headlessChatClass(ai.AbstractChat);
    const sdkPredicate = o =>
      ai.lastAssistantMessageIsCompleteWithApprovalResponses(o) ||
      ai.lastAssistantMessageIsCompleteWithToolCalls(o);
    const predicates = { sdk: sdkPredicate, page: pagePredicate, none: undefined };
    this.chat = new Chat({
      id: scenario.chatId,
      messages: scenario.messages ?? [],
      transport,
      sendAutomaticallyWhen: predicates[scenario.predicate ?? 'sdk'],
      onToolCall: ({ toolCall }) => this.onToolCall(toolCall),
      onFinish: ({ isAbort, isDisconnect, isError, finishReason }) =>
        this.finishes.push({ isAbort, isDisconnect, isError, finishReason }),
    });
  }

  makeTransport(WsTransport6) {
    const { scenario, ai } = this;
    const base = (scenario.baseUrl ?? 'http://127.0.0.1:8080').replace(/\/$/, '');
    const common = { headers: scenario.headers ?? {}, body: scenario.body ?? {} };
    // `lastMessage`: the AI SDK's persistence pattern, only the last message in each request (the
    // server holds the history): the body's `message` over HTTP, one message in a send frame.
    const lastOnly = scenario.lastMessage === true;
    if (this.kind.transport === 'sse') {
      return new ai.DefaultChatTransport({
        ...common,
        api: scenario.api ?? `${base}/api/chat`,
        fetch: this.recorder.fetch(),
        ...(lastOnly
          ? {
              prepareSendMessagesRequest: ({ id, messages, trigger, messageId, body }) => ({
                body: { ...body, id, message: messages.at(-1), trigger, messageId },
              }),
            }
          : {}),
      });
    }
    const url = scenario.wsUrl ?? `${base.replace(/^http/, 'ws')}/api/chat/ws`;
    const RecordingWebSocket = this.recorder.webSocket(WebSocket);
    const Transport = this.kind.transport === 'ws' ? ai.WebSocketChatTransport : WsTransport6;
    // v7 names the option `webSocket`; the ai 6 port may name it `WebSocket`. `params` become query
    // parameters of the socket URL (how a browser sends `access_token`).
    return new Transport({
      ...common,
      ...(scenario.params != null ? { params: scenario.params } : {}),
      ...(lastOnly
        ? {
            prepareSendMessagesRequest: ({ messages, body }) => ({
              messages: messages.slice(-1),
              body: { ...body, message: messages.at(-1) },
            }),
          }
        : {}),
      url,
      webSocket: RecordingWebSocket,
      WebSocket: RecordingWebSocket,
    });
  }

  /** Runs a browser tool when it may: approved, or configured as not needing approval. */
  onToolCall(toolCall) {
    const config = this.scenario.browserTools?.[toolCall.toolName];
    const parts = toolParts(this.chat.messages, toolCall.toolCallId);
    // Approved for this call, or "always" allowed earlier in the chat (then the gateway announces
    // later calls without a question to an ai 6 client).
    const approved =
      parts.some(p => p.approval?.approved === true) ||
      this.chat.messages.some(m =>
        m.parts.some(
          p =>
            (p.type === `tool-${toolCall.toolName}` || p.toolName === toolCall.toolName) &&
            p.approval?.approved === true &&
            p.approval?.reason === 'always',
        ),
      );
    const record = {
      toolName: toolCall.toolName,
      toolCallId: toolCall.toolCallId,
      input: toolCall.input,
      approved,
    };
    this.toolCalls.push(record);
    if (config == null) {
      record.action = 'unconfigured';
    } else if ((config.needsApproval ?? true) && !approved) {
      record.action = 'deferred'; // wait for the approval and the re-announcement
    } else if (this.ranTools.has(toolCall.toolCallId)) {
      record.action = 'repeat'; // announced again after it already ran: not run twice
    } else {
      record.action = 'ran';
      this.ranTools.add(toolCall.toolCallId);
      const result =
        config.errorText != null
          ? { state: 'output-error', errorText: config.errorText }
          : { output: config.output ?? null };
      const answer = () =>
        this.chat.addToolOutput({ tool: toolCall.toolName, toolCallId: toolCall.toolCallId, ...result });
      // `visit`: an input field holding a URL the user opens first (a sign-in's `authUri`, in a
      // popup on a page): fetched here with its redirects followed, then the tool is answered.
      const url = config.visit != null ? toolCall.input?.[config.visit] : undefined;
      if (url != null) {
        record.visited = url;
        this.track(
          fetch(url, { redirect: 'follow' }).then(async response => {
            record.visitStatus = response.status;
            record.visitBody = (await response.text()).slice(0, 2000);
            return answer();
          }),
          'visit',
        );
        return;
      }
      // Not awaited: onToolCall runs inside the chat's serial job queue.
      this.track(answer(), 'addToolOutput');
    }
  }

  track(promise, what) {
    const tracked = Promise.resolve(promise).catch(error => {
      this.driverErrors.push(`${what}: ${error?.message ?? error}`);
    });
    this.inflight.add(tracked);
    tracked.finally(() => this.inflight.delete(tracked));
    return tracked;
  }

  busy() {
    const { chat } = this;
    return (
      chat.status === 'submitted' ||
      chat.status === 'streaming' ||
      chat.activeResponse != null ||
      this.inflight.size > 0
    );
  }

  /** Waits until the chat has been ready/error, with nothing in flight, for `quietMs`. */
  async waitIdle({ quietMs = 150 } = {}) {
    let quietSince;
    for (;;) {
      if (this.busy()) {
        quietSince = undefined;
      } else {
        quietSince ??= Date.now();
        if (Date.now() - quietSince >= quietMs) return;
      }
      await sleep(10);
    }
  }

  pendingApprovals(toolName) {
    const parts = this.chat.messages.flatMap(m => m.parts);
    return parts.filter(
      p =>
        p.state === 'approval-requested' &&
        toolNameOf(p) !== undefined &&
        (toolName == null || toolNameOf(p) === toolName),
    );
  }

  async stopAfter(chunks, text) {
    const entry = await this.waitForChunks(chunks, 'stopAfter');
    if (text != null) await this.waitForAssistantText(text);
    entry.stoppedAfterChunks = entry.chunks.length;
    await this.chat.stop();
  }

  /** Waits (bounded) until the chat's last assistant message shows `text`: the fetch can be
   * ahead of what the chat has processed, so chunk counts alone do not say what it shows. */
  async waitForAssistantText(text, timeoutMs = 5000) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const last = this.chat.messages.at(-1);
      const shown = last?.role === 'assistant'
        ? last.parts.filter(p => p.type === 'text').map(p => p.text).join('')
        : '';
      if (shown.includes(text)) return;
      if (Date.now() > deadline) throw new Error(`assistant text never showed ${JSON.stringify(text)}`);
      await sleep(5);
    }
  }

  /** Waits until the current (or next) response has delivered `chunks` chunks; returns its entry. */
  async waitForChunks(chunks, what) {
    const startIndex = this.recorder.requests.length;
    // The response to watch: the one streaming now, or the next one.
    const current = this.recorder.requests.findLast(r => !r.done);
    const target = () => current ?? this.recorder.requests[startIndex];
    const reached = new Promise(resolve => {
      const check = () => {
        const entry = target();
        if (entry != null && entry.chunks.length >= chunks) resolve(entry);
      };
      this.recorder.chunkListeners.add(check);
      check();
      this.reachedCleanup = () => this.recorder.chunkListeners.delete(check);
    });
    const ended = (async () => {
      await sleep(50);
      await this.waitIdle();
    })();
    const entry = await Promise.race([reached, ended]);
    this.reachedCleanup();
    if (entry == null) {
      const got = target()?.chunks.length ?? 0;
      throw new ScenarioError(`${what}: the response ended after ${got} chunks, before ${chunks}`);
    }
    return entry;
  }

  /**
   * A raw HTTP request against the gateway (an `http` step), outside the chat client: `{chatId}`
   * in the path becomes this client's chat id; the client's scenario headers go under the step's
   * own (unless `noDefaultHeaders`); an object body is sent as JSON. Records the status, the
   * response headers and the body (parsed JSON, else text) under `http` in the result.
   */
  async httpStep(step) {
    if (typeof step.path !== 'string' || !step.path.startsWith('/')) {
      throw new ScenarioError('http: `path` must be an absolute path, like "/api/me"');
    }
    const base = (this.scenario.baseUrl ?? 'http://127.0.0.1:8080').replace(/\/$/, '');
    const url = base + step.path.replaceAll('{chatId}', encodeURIComponent(this.chat.id));
    const lower = headers =>
      Object.fromEntries(Object.entries(headers ?? {}).map(([key, value]) => [key.toLowerCase(), value]));
    const headers = {
      ...(step.noDefaultHeaders ? {} : lower(this.scenario.headers)),
      ...lower(step.headers),
    };
    if (step.contentType != null) headers['content-type'] = step.contentType;
    const init = { method: (step.method ?? 'GET').toUpperCase(), headers };
    if (step.body !== undefined) {
      init.body = typeof step.body === 'string' ? step.body : JSON.stringify(step.body);
    }
    const record = { name: step.name ?? `http${this.http.length}`, method: init.method, url };
    this.http.push(record);
    const response = await fetch(url, init);
    record.status = response.status;
    record.headers = Object.fromEntries(response.headers.entries());
    const text = await response.text();
    try {
      record.body = JSON.parse(text);
    } catch {
      record.body = text;
    }
  }

  /**
   * Another chat client of this scenario (created at its first step): same kind, base URL,
   * headers, params and body as the main one unless its `peers` entry says otherwise, and the same chat
   * id. `messagesFrom: "main"` starts it with a copy of the main chat's messages at that moment
   * (a page reloaded with its persisted messages); `messagesFrom: "http:<name>"` with the
   * `messages` of the JSON answer of the `http` step named so (a chat loaded from the server).
   */
  peer(name) {
    let peer = this.peers.get(name);
    if (peer != null) return peer;
    const config = this.scenario.peers?.[name];
    if (config == null) throw new ScenarioError(`unknown client ${JSON.stringify(name)} (not in peers)`);
    const { peers: _peers, steps: _steps, ...shared } = this.scenario;
    const { messagesFrom, ...own } = config;
    const scenario = { ...shared, ...own, chatId: own.chatId ?? this.scenario.chatId ?? this.chat.id };
    if (messagesFrom === 'main') scenario.messages = structuredClone(this.chat.messages);
    if (messagesFrom?.startsWith('http:')) {
      // The `messages` of an earlier `http` step's JSON answer (a chat loaded from the server).
      const source = messagesFrom.slice('http:'.length);
      const answer = this.clients().flatMap(c => c.http).find(h => h.name === source);
      if (!Array.isArray(answer?.body?.messages)) {
        throw new ScenarioError(`peer ${name}: no http step ${JSON.stringify(source)} answered with messages`);
      }
      scenario.messages = structuredClone(answer.body.messages);
    }
    peer = new Run(scenario, this.ai, this.modules, { name, main: this });
    this.peers.set(name, peer);
    return peer;
  }

  /** Every client of the scenario, the main one first. */
  clients() {
    return [this, ...this.peers.values()];
  }

  async step(step) {
    const { chat } = this;
    const options = {};
    if (step.headers) options.headers = step.headers;
    if (step.body) options.body = step.body;
    switch (step.type) {
      case 'send':
        if (step.wait !== false) await this.waitIdle();
        this.track(chat.sendMessage({ text: step.text }, options), 'sendMessage');
        await sleep(0);
        return;
      case 'approve': {
        await this.waitIdle();
        const pending = this.pendingApprovals(step.toolName);
        const part = pending[step.approvalIndex ?? 0];
        if (part == null) {
          throw new ScenarioError(
            `approve: no pending approval` +
              (step.toolName ? ` for ${step.toolName}` : '') +
              ` (pending: ${pending.length})`,
          );
        }
        await chat.addToolApprovalResponse({
          id: part.approval.id,
          approved: step.approved ?? true,
          ...(step.reason !== undefined ? { reason: step.reason } : {}),
        });
        await sleep(0);
        return;
      }
      case 'continue': // sendMessage() without a message: posts the history as it is
        if (step.wait !== false) await this.waitIdle();
        this.track(chat.sendMessage(undefined, options), 'sendMessage()');
        await sleep(0);
        return;
      case 'waitIdle':
        await this.waitIdle(step);
        return;
      case 'stopAfter':
        await this.stopAfter(step.chunks ?? 1, step.text);
        return;
      case 'waitChunks': // like stopAfter, without the stop
        await this.waitForChunks(step.chunks ?? 1, 'waitChunks');
        if (step.text != null) await this.waitForAssistantText(step.text);
        return;
      case 'stop':
        await chat.stop();
        return;
      case 'resume':
        if (step.wait !== false) await this.waitIdle();
        this.track(chat.resumeStream(options), 'resumeStream');
        await sleep(0);
        return;
      case 'regenerate':
        await this.waitIdle();
        this.track(
          chat.regenerate({ ...(step.messageId ? { messageId: step.messageId } : {}), ...options }),
          'regenerate',
        );
        await sleep(0);
        return;
      case 'http':
        await this.httpStep(step);
        return;
      case 'sleep':
        await sleep(step.ms ?? 0);
        return;
      default:
        throw new ScenarioError(`unknown step type ${JSON.stringify(step.type)}`);
    }
  }

  async execute() {
    for (const [i, step] of (this.scenario.steps ?? []).entries()) {
      if (this.recorder.loop) break;
      try {
        const client = step.client == null || step.client === 'main' ? this : this.peer(step.client);
        await client.step(step);
      } catch (error) {
        this.driverErrors.push(`step ${i} (${step.type}): ${error?.message ?? error}`);
        break;
      }
    }
    for (const client of this.clients()) await client.waitIdle();
    // Let the recorders finish reading bodies/frames (bounded: an aborted body may linger).
    const pending = this.clients().flatMap(client => [...client.recorder.pending]);
    await Promise.race([Promise.allSettled(pending), sleep(2000)]);
  }

  result({ timedOut = false } = {}) {
    const { chat, recorder } = this;
    const requests = recorder.summary();
    const count = kind => requests.filter(r => r.kind === kind).length;
    const counts = {
      posts: count('post'),
      gets: count('get'),
      wsSends: count('ws-send'),
      wsResumes: count('ws-resume'),
      wsAborts: requests.filter(r => r.abortSent).length,
    };
    counts.sends = counts.posts + counts.wsSends;
    const peers = Object.fromEntries([...this.peers].map(([name, peer]) => [name, peer.result({ timedOut })]));
    const ok =
      !timedOut &&
      !recorder.loop &&
      recorder.validationErrors.length === 0 &&
      this.driverErrors.length === 0 &&
      Object.values(peers).every(peer => peer.ok);
    return {
      ok,
      kind: this.scenario.kind,
      chatId: chat.id,
      status: chat.status,
      error: chat.error ? String(chat.error.message ?? chat.error) : null,
      errorStatusCode: chat.error?.statusCode ?? null,
      messages: chat.messages,
      requests,
      counts,
      validationErrors: recorder.validationErrors,
      loop: recorder.loop,
      timedOut,
      toolCalls: this.toolCalls,
      finishes: this.finishes,
      wsEvents: recorder.wsEvents,
      http: this.http,
      driverErrors: this.driverErrors,
      durationMs: Date.now() - this.started,
      ...(this.peers.size > 0 ? { peers } : {}),
    };
  }

  async close() {
    for (const client of this.clients()) {
      try {
        await Promise.race([client.chat.stop(), sleep(500)]);
        client.transport.close?.();
      } catch {
        // closing is best effort
      }
    }
  }
}

// ---------------------------------------------------------------------------

async function readScenario() {
  const arg = process.argv[2];
  const text = arg ? readFileSync(arg, 'utf8') : readFileSync(0, 'utf8');
  const scenario = JSON.parse(text);
  if (KINDS[scenario.kind] == null) {
    throw new ScenarioError(`kind must be one of ${Object.keys(KINDS).join(', ')}`);
  }
  for (const [name, peer] of Object.entries(scenario.peers ?? {})) {
    if (name === 'main') throw new ScenarioError('a peer may not be named "main"');
    const kind = KINDS[peer.kind ?? scenario.kind];
    if (kind == null) throw new ScenarioError(`peer ${name}: kind must be one of ${Object.keys(KINDS).join(', ')}`);
    if (kind.pkg !== KINDS[scenario.kind].pkg) {
      throw new ScenarioError(`peer ${name}: kind ${peer.kind} uses another ai package than ${scenario.kind}`);
    }
    if (![undefined, 'main'].includes(peer.messagesFrom) && !String(peer.messagesFrom).startsWith('http:')) {
      throw new ScenarioError(`peer ${name}: messagesFrom must be "main" or "http:<step name>"`);
    }
  }
  for (const s of [scenario, ...Object.values(scenario.peers ?? {})]) {
    if (!['sdk', 'page', 'none', undefined].includes(s.predicate)) {
      throw new ScenarioError('predicate must be sdk, page or none');
    }
    if (s.params != null && (typeof s.params !== 'object' || Array.isArray(s.params))) {
      throw new ScenarioError('params must be an object of query parameters');
    }
  }
  return scenario;
}

/**
 * Makes bare imports in web/src (the chat page's modules) and web/ws-transport (the ai 6
 * port) resolve from here, with `ai` meaning the client package under test (ai6 or ai7):
 * one copy of the SDK per run, and no need for web/node_modules.
 */
function redirectWebImports(pkg) {
  const hooks = `
    const dirs = ${JSON.stringify([WEB_SRC, WS6_DIR].map(dir => pathToFileURL(dir).href + '/'))};
    const here = ${JSON.stringify(import.meta.url)};
    export async function resolve(specifier, context, next) {
      const bare = !specifier.startsWith('.') && !specifier.startsWith('/') && !specifier.includes(':');
      if (bare && dirs.some(dir => context.parentURL?.startsWith(dir))) {
        const target = specifier === 'ai' ? ${JSON.stringify(pkg)} : specifier;
        return next(target, { ...context, parentURL: here });
      }
      return next(specifier, context);
    }`;
  register(`data:text/javascript,${encodeURIComponent(hooks)}`);
}

async function importExport(modulePath, name) {
  const module = await import(pathToFileURL(path.resolve(modulePath)).href);
  if (typeof module[name] !== 'function') {
    throw new ScenarioError(`${modulePath} does not export ${name}`);
  }
  return module[name];
}

async function loadClient(scenario) {
  const { pkg, transport } = KINDS[scenario.kind];
  redirectWebImports(pkg);
  const client = { ai: await import(pkg) };
  const kinds = [scenario.kind, ...Object.values(scenario.peers ?? {}).map(peer => peer.kind ?? scenario.kind)];
  if (transport === 'ws6' || kinds.some(kind => KINDS[kind].transport === 'ws6')) {
    const modulePath = scenario.wsTransportModule ?? DEFAULT_WS6_MODULE;
    client.WsTransport6 = await importExport(modulePath, 'WebSocketChatTransport');
  }
  if ([scenario, ...Object.values(scenario.peers ?? {})].some(s => s.predicate === 'page')) {
    client.pagePredicate = await importExport(PAGE_PREDICATE_MODULE, 'sendAutomaticallyWhen');
  }
  return client;
}

function emit(result, code = 0) {
  process.stdout.write(JSON.stringify(result) + '\n', () => process.exit(code));
}

async function main() {
  let scenario;
  let client;
  try {
    scenario = await readScenario();
    client = await loadClient(scenario);
  } catch (error) {
    emit({ ok: false, driverErrors: [`setup: ${error?.message ?? error}`] }, 2);
    return;
  }
  const run = new Run(scenario, client.ai, client);
  const timeoutMs = scenario.timeoutMs ?? 20000;
  const timer = setTimeout(() => {
    run.driverErrors.push(`scenario timed out after ${timeoutMs} ms`);
    for (const client of run.clients()) {
      for (const entry of client.recorder.requests.filter(r => !r.done)) {
        const last = entry.chunks[entry.chunks.length - 1]?.type ?? 'none';
        run.driverErrors.push(
          `${client.name}: request ${entry.index} (${entry.kind}) still open after ` +
            `${entry.chunks.length} chunks (last: ${last})`,
        );
      }
    }
    emit(run.result({ timedOut: true }));
  }, timeoutMs);
  try {
    await run.execute();
  } catch (error) {
    run.driverErrors.push(`driver: ${error?.stack ?? error}`);
  }
  clearTimeout(timer);
  await run.close();
  emit(run.result());
}

main();

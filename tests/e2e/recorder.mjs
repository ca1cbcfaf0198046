// Records what the AI SDK client sends and receives, and checks every chunk.
//
// The client classes are used unmodified; we only wrap what they are given:
// - `fetch` (DefaultChatTransport's `fetch` option): each response body is teed,
//   one branch goes to the client, the other is parsed here as SSE;
// - the WebSocket constructor (the WS transports' `webSocket` option): outgoing
//   frames are read in `send`, incoming frames through an extra 'message' listener.
//
// Every chunk is validated with the client package's own `uiMessageChunkSchema`
// and checked for `null` values (optional fields must be absent, not null).

// Keys whose values are arbitrary JSON (tool arguments and results, data parts):
// null is legal there and their contents are not inspected.
const FREE_JSON_KEYS = new Set(['input', 'output', 'data']);

export class LoopGuardError extends Error {
  constructor(limit) {
    super(`e2e driver: more than ${limit} requests in one scenario (resend loop?)`);
    this.name = 'LoopGuardError';
  }
}

/** Paths of every `null` in `value`, skipping the free-JSON keys. */
export function findNulls(value, path = '') {
  if (value === null) return [path || '(root)'];
  if (typeof value !== 'object') return [];
  const found = [];
  if (Array.isArray(value)) {
    value.forEach((item, i) => found.push(...findNulls(item, `${path}[${i}]`)));
    return found;
  }
  for (const [key, item] of Object.entries(value)) {
    if (FREE_JSON_KEYS.has(key)) continue;
    found.push(...findNulls(item, path ? `${path}.${key}` : key));
  }
  return found;
}

/** A short reason for a zod union failure: the issues of the branch whose `type` matched. */
function describeSchemaError(error, chunk) {
  const union = error?.issues?.[0];
  if (union?.code === 'invalid_union' && Array.isArray(union.errors)) {
    const branch = union.errors.find(
      issues => !issues.some(i => i.path?.[0] === 'type' && i.code === 'invalid_value'),
    );
    if (branch == null) return `unknown chunk type ${JSON.stringify(chunk?.type)}`;
    return branch.map(i => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
  }
  return String(error?.message ?? error).slice(0, 500);
}

/** Incremental SSE parser (WHATWG rules) that reports each event's data and field names. */
class SseParser {
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buffer = '';
    this.data = [];
    this.fields = new Set();
    this.comments = 0;
  }

  push(text) {
    this.buffer += text;
    const lines = this.buffer.split(/\r\n|\r|\n/);
    this.buffer = lines.pop();
    for (const line of lines) this.line(line);
  }

  end() {
    if (this.buffer !== '') this.line(this.buffer);
    this.buffer = '';
    this.dispatch();
  }

  line(line) {
    if (line === '') return this.dispatch();
    if (line.startsWith(':')) {
      this.comments += 1;
      return;
    }
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    this.fields.add(field);
    if (field === 'data') this.data.push(value);
  }

  dispatch() {
    if (this.data.length === 0) return;
    const data = this.data.join('\n');
    this.data = [];
    this.onEvent(data);
  }
}

export class Recorder {
  /**
   * @param schema the client package's `uiMessageChunkSchema`, wrapped with `asSchema`
   * @param maxRequests requests (POST/GET/WS send/WS resume) allowed before the loop guard trips
   * @param includeChunks keep each request's full chunk list in the result
   */
  constructor({ schema, maxRequests, includeChunks }) {
    this.schema = schema;
    this.maxRequests = maxRequests;
    this.includeChunks = includeChunks;
    this.requests = [];
    this.validationErrors = [];
    this.loop = false;
    this.onLoop = () => {};
    this.chunkListeners = new Set();
    this.pending = new Set(); // body readers still running
    this.wsEvents = []; // socket opens/closes and frames that matched no request
  }

  /** Registers one outgoing request; throws LoopGuardError past the cap. */
  begin(info) {
    if (this.requests.length >= this.maxRequests) {
      this.loop = true;
      this.onLoop();
      throw new LoopGuardError(this.maxRequests);
    }
    const entry = {
      index: this.requests.length,
      ...info,
      chunks: [],
      done: false,
    };
    this.requests.push(entry);
    return entry;
  }

  latest() {
    return this.requests[this.requests.length - 1];
  }

  track(promise) {
    this.pending.add(promise);
    promise.finally(() => this.pending.delete(promise));
  }

  async chunk(entry, chunk) {
    const nulls = findNulls(chunk);
    if (nulls.length > 0) this.fail(entry, chunk, `null at ${nulls.join(', ')}`);
    const result = await this.schema.validate(chunk);
    if (!result.success) this.fail(entry, chunk, describeSchemaError(result.error, chunk));
    entry.chunks.push(chunk);
    if (chunk?.type === 'finish' && chunk.finishReason !== undefined) {
      entry.finishReason = chunk.finishReason;
    }
    for (const listener of this.chunkListeners) listener(entry);
  }

  fail(entry, chunk, reason) {
    this.validationErrors.push({
      request: entry.index,
      chunkIndex: entry.chunks.length,
      chunk,
      reason,
    });
  }

  /** A `fetch` for DefaultChatTransport that records each request and its SSE body. */
  fetch() {
    return async (url, init = {}) => {
      const method = (init.method ?? 'GET').toUpperCase();
      const info = { kind: method === 'POST' ? 'post' : 'get', url: String(url) };
      if (method === 'POST' && typeof init.body === 'string') {
        const body = JSON.parse(init.body);
        Object.assign(info, describeSend(body));
      }
      const entry = this.begin(info);
      let response;
      try {
        response = await fetch(url, init);
      } catch (error) {
        entry.error = String(error?.message ?? error);
        entry.done = true;
        throw error;
      }
      entry.httpStatus = response.status;
      entry.headers = Object.fromEntries(response.headers.entries());
      if (!response.ok || response.body == null) {
        entry.done = true;
        if (!response.ok) entry.errorBody = await response.clone().text();
        return response;
      }
      const [forClient, forUs] = response.body.tee();
      this.track(this.readSse(entry, forUs));
      return new Response(forClient, {
        status: response.status,
        statusText: response.statusText,
        headers: response.headers,
      });
    };
  }

  async readSse(entry, body) {
    const events = [];
    const parser = new SseParser(data => events.push(data));
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    entry.sawDone = false;
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        parser.push(value);
        while (events.length > 0) await this.event(entry, events.shift());
      }
      parser.end();
      while (events.length > 0) await this.event(entry, events.shift());
      entry.end = 'eof';
    } catch (error) {
      entry.end = error?.name === 'AbortError' ? 'aborted' : `error: ${error?.message ?? error}`;
    } finally {
      entry.done = true;
      entry.sseFields = [...parser.fields];
      entry.sseComments = parser.comments;
    }
  }

  async event(entry, data) {
    if (data === '[DONE]') {
      entry.sawDone = true;
      return;
    }
    if (entry.sawDone) this.fail(entry, data.slice(0, 300), 'event after [DONE]');
    let chunk;
    try {
      chunk = JSON.parse(data);
    } catch {
      this.fail(entry, data.slice(0, 300), 'data is not JSON');
      return;
    }
    await this.chunk(entry, chunk);
  }

  /** A WebSocket constructor (subclass of `ws`) that records the chat frame protocol. */
  webSocket(BaseWebSocket) {
    const recorder = this;
    return class RecordingWebSocket extends BaseWebSocket {
      constructor(url, protocols) {
        super(url, protocols);
        recorder.wsEvents.push({ event: 'connect', url: String(url) });
        let tail = Promise.resolve();
        // Registered before the transport sets `onmessage`, so it runs first.
        this.on('message', (data, isBinary) => {
          const text = isBinary ? null : data.toString();
          tail = tail.then(() => recorder.wsFrame(text));
          recorder.track(tail);
        });
        // A refused handshake (`ws` says "Unexpected server response: 401") or a network error.
        this.on('error', error => {
          recorder.wsEvents.push({ event: 'error', message: String(error?.message ?? error) });
        });
        this.on('close', (code, reason) => {
          recorder.wsEvents.push({ event: 'close', code, reason: reason.toString() });
        });
      }

      send(data, ...rest) {
        if (typeof data === 'string' && !recorder.wsOutgoing(data)) return;
        super.send(data, ...rest);
      }
    };
  }

  /** Records an outgoing frame; returns false when the loop guard withholds it. */
  wsOutgoing(text) {
    let frame;
    try {
      frame = JSON.parse(text);
    } catch {
      return true;
    }
    if (frame.type === 'abort') {
      const entry = this.requests.find(r => r.requestId === frame.requestId);
      if (entry) entry.abortSent = true;
      else this.wsEvents.push({ event: 'abort-unknown', requestId: frame.requestId });
      return true;
    }
    if (frame.type !== 'send' && frame.type !== 'resume') return true;
    const info =
      frame.type === 'send'
        ? { kind: 'ws-send', ...describeSend(frame) }
        : { kind: 'ws-resume', chatId: frame.id, lastSequence: frame.lastSequence };
    info.requestId = frame.requestId;
    info.frameHeaders = frame.headers;
    try {
      this.begin(info);
    } catch (error) {
      if (error instanceof LoopGuardError) return false;
      throw error;
    }
    return true;
  }

  async wsFrame(text) {
    if (text == null) {
      this.wsEvents.push({ event: 'binary-frame' });
      return;
    }
    let frame;
    try {
      frame = JSON.parse(text);
    } catch {
      this.validationErrors.push({ request: null, chunk: text.slice(0, 300), reason: 'WS frame not JSON' });
      return;
    }
    const entry = this.requests.find(r => r.requestId != null && r.requestId === frame.requestId);
    if (entry == null) {
      this.wsEvents.push({ event: 'unmatched-frame', type: frame.type, requestId: frame.requestId });
      return;
    }
    const nulls = findNulls({ ...frame, chunk: undefined });
    if (nulls.length > 0) this.fail(entry, frame, `null in frame at ${nulls.join(', ')}`);
    switch (frame.type) {
      case 'start':
        entry.started = true;
        return;
      case 'chunk': {
        const expected = entry.chunks.length;
        if (frame.sequence !== expected) {
          this.fail(entry, frame, `sequence ${frame.sequence}, expected ${expected}`);
        }
        if (frame.chunk === undefined) this.fail(entry, frame, 'chunk frame without chunk');
        else await this.chunk(entry, frame.chunk);
        return;
      }
      case 'end':
      case 'no-active':
        entry.end = frame.type;
        entry.done = true;
        return;
      case 'error':
        entry.end = 'error';
        entry.error = frame.errorText;
        if (frame.code !== undefined) entry.errorCode = frame.code;
        entry.done = true;
        return;
      default:
        this.fail(entry, frame, `unknown frame type ${JSON.stringify(frame.type)}`);
    }
  }

  /** The per-request summary for the result JSON. */
  summary() {
    return this.requests.map(({ chunks, ...entry }) => ({
      ...entry,
      chunkTypes: chunks.map(c => c?.type),
      ...(this.includeChunks ? { chunks } : {}),
    }));
  }
}

function describeSend(body) {
  // A last-message request (`message`, in the body or a send frame's body) or the full history.
  const single = body.message ?? body.body?.message;
  const last = single ?? (Array.isArray(body.messages) ? body.messages[body.messages.length - 1] : undefined);
  return {
    chatId: body.id,
    trigger: body.trigger,
    messageId: body.messageId,
    lastMessageRole: last?.role,
    messageCount: Array.isArray(body.messages) ? body.messages.length : undefined,
    lastMessageOnly: single != null,
  };
}

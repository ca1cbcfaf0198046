/**
 * WebSocketChatTransport for `ai` 6: a ChatTransport that multiplexes chat
 * requests over one WebSocket and speaks exactly the frame protocol of the
 * stock `WebSocketChatTransport` of `ai` 7 (ai >= 7.0.135), so the gateway's
 * `GET /api/chat/ws` serves v6 pages (this class) and v7 apps (the stock
 * class) alike.
 *
 * Port of ai 7.0.173 `src/ui/websocket-chat-transport.ts` (Apache-2.0,
 * Vercel, Inc.), in plain ESM JavaScript. ai 6 and its provider-utils lack
 * the WebSocket helpers the v7 class imports, so they are re-implemented here.
 *
 * Frames (all JSON text):
 *   client -> server
 *     {type:'send', requestId, id, trigger, messageId?, messages, headers, body, metadata?}
 *     {type:'resume', requestId, id, lastSequence?, headers, body, metadata?}  (lastSequence omitted: full replay)
 *     {type:'abort', requestId}
 *   server -> client
 *     {type:'start', requestId}                          resolves a pending resume
 *     {type:'chunk', requestId, sequence, chunk}         sequence 0,1,2... per request
 *     {type:'end', requestId}                            closes that request's stream
 *     {type:'error', requestId, errorText?}              errors that request's stream
 *     {type:'no-active', requestId}                      resume: nothing active (null)
 *
 * Behaviour (as v7): the socket is opened lazily on the first request and
 * shared by all requests; a chunk whose sequence is at or below the last one
 * seen is ignored; a gap, an invalid chunk, a non-JSON frame or an unknown
 * frame type tears the whole socket down (code 1011) and errors every active
 * request; frames for unknown requestIds are ignored; an aborted request sends
 * an `abort` frame and keeps the socket; a closed socket errors every active
 * request with a TypeError whose message contains "network", which `Chat`
 * treats as a resumable disconnect.
 */

import { asSchema, generateId, uiMessageChunkSchema } from 'ai';

/**
 * @typedef {import('ai').UIMessage} UIMessage
 * @typedef {import('ai').UIMessageChunk} UIMessageChunk
 * @typedef {import('ai').ChatTransport<UIMessage>} ChatTransport
 *
 * @typedef {{
 *   readyState: number,
 *   bufferedAmount?: number,
 *   send(data: string): void,
 *   close(code?: number, reason?: string): void,
 *   onopen: ((event: unknown) => void) | null,
 *   onmessage: ((event: { data: unknown }) => void) | null,
 *   onerror: ((event: unknown) => void) | null,
 *   onclose: ((event: unknown) => void) | null,
 * }} WebSocketLike
 *
 * @typedef {new (url: string | URL, protocols?: string | string[]) => WebSocketLike} WebSocketConstructor
 *
 * @template T
 * @typedef {T | PromiseLike<T> | (() => T | PromiseLike<T>)} Resolvable
 */

/**
 * @typedef {object} WebSocketChatTransportOptions
 * @property {string} [url] WebSocket endpoint. Relative URLs resolve against
 *   the page location; http(s) becomes ws(s). Default: `/api/chat/ws` on the
 *   page's own origin (required outside a browser).
 * @property {string | string[]} [protocols] WebSocket subprotocols.
 * @property {Resolvable<Record<string, string>>} [params] query parameters
 *   added to the URL whenever a new connection is opened.
 * @property {Resolvable<Record<string, string> | Headers>} [headers] headers
 *   sent inside each send/resume frame (browsers cannot set handshake headers).
 * @property {Resolvable<object>} [body] extra fields merged into each
 *   send/resume frame's `body`.
 * @property {WebSocketConstructor} [WebSocket] WebSocket class to use
 *   (default `globalThis.WebSocket`; Node 20 has none: pass the `ws` package's).
 * @property {WebSocketConstructor} [webSocket] alias of `WebSocket` (the v7 name).
 * @property {boolean} [validate] validate every chunk with the `ai` package's
 *   `uiMessageChunkSchema` (default true).
 * @property {(options: {id: string, messages: UIMessage[], requestMetadata: unknown, body: object,
 *   headers: Record<string, string>, trigger: 'submit-message' | 'regenerate-message',
 *   messageId: string | undefined}) => ({messages?: UIMessage[], body?: object, headers?: HeadersInit}
 *   | PromiseLike<{messages?: UIMessage[], body?: object, headers?: HeadersInit}>)} [prepareSendMessagesRequest]
 * @property {(options: {id: string, requestMetadata: unknown, body: object,
 *   headers: Record<string, string>}) => ({body?: object, headers?: HeadersInit}
 *   | PromiseLike<{body?: object, headers?: HeadersInit}>)} [prepareReconnectToStreamRequest]
 */

const WEBSOCKET_OPEN_STATE = 1;
export const DEFAULT_WS_PATH = '/api/chat/ws';

/**
 * @param {AbortSignal | undefined} signal
 * @returns {Error}
 */
function createAbortError(signal) {
  const reason = signal?.reason;
  if (reason instanceof Error) {
    return reason;
  }
  const error = new Error('The WebSocket chat request was aborted.');
  error.name = 'AbortError';
  return error;
}

/** @param {unknown} error @returns {Error} */
function asError(error) {
  return error instanceof Error ? error : new Error(String(error));
}

/** @param {unknown} value @returns {value is Record<string, unknown>} */
/**
 * A promise with its settle functions, marked handled: whoever still waits on
 * it gets the rejection; a promise nobody waits on any more raises no
 * unhandled rejection.
 * @template T
 * @returns {{promise: Promise<T>, resolve: (value: T) => void, reject: (error: Error) => void}}
 */
function deferred() {
  /** @type {(value: T) => void} */
  let resolve = () => {};
  /** @type {(error: Error) => void} */
  let reject = () => {};
  /** @type {Promise<T>} */
  const promise = new Promise((res, rej) => {
    resolve = res;
    reject = rej;
  });
  void promise.catch(() => {});
  return { promise, resolve, reject };
}

function isRecord(value) {
  return value != null && typeof value === 'object' && !Array.isArray(value);
}

/** @param {unknown} value @returns {value is number} */
function isSequence(value) {
  return Number.isSafeInteger(value) && /** @type {number} */ (value) >= 0;
}

/**
 * @template T
 * @param {Resolvable<T> | undefined} value
 * @returns {Promise<T | undefined>}
 */
async function resolveValue(value) {
  if (typeof value === 'function') {
    value = /** @type {() => T} */ (value)();
  }
  return value;
}

/**
 * Lower-cases header names and drops undefined values (as provider-utils'
 * normalizeHeaders does).
 * @param {HeadersInit | Record<string, string | undefined> | undefined} headers
 * @returns {Record<string, string>}
 */
export function normalizeHeaders(headers) {
  /** @type {Record<string, string>} */
  const normalized = {};
  if (headers == null) {
    return normalized;
  }
  if (typeof Headers !== 'undefined' && headers instanceof Headers) {
    headers.forEach((value, key) => {
      normalized[key.toLowerCase()] = value;
    });
    return normalized;
  }
  const entries = Array.isArray(headers) ? headers : Object.entries(headers);
  for (const [key, value] of entries) {
    if (value != null) {
      normalized[key.toLowerCase()] = String(value);
    }
  }
  return normalized;
}

/**
 * The gateway's WebSocket URL for the current page: same origin, ws/wss,
 * path `/api/chat/ws`. Returns undefined outside a browser.
 * @param {string} [path]
 * @returns {string | undefined}
 */
export function defaultWebSocketUrl(path = DEFAULT_WS_PATH) {
  const location = globalThis.location;
  if (location == null || !location.host) {
    return undefined;
  }
  const protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return `${protocol}//${location.host}${path}`;
}

const textDecoder = new TextDecoder();

/**
 * Message data as text: string, ArrayBuffer, typed array / Buffer, or Blob.
 * @param {unknown} data
 * @returns {Promise<string>}
 */
async function readWebSocketMessageText(data) {
  if (typeof data === 'string') return data;
  if (data instanceof ArrayBuffer) return textDecoder.decode(data);
  if (ArrayBuffer.isView(data)) return textDecoder.decode(data);
  if (Array.isArray(data)) {
    // `ws` may deliver fragmented messages as Buffer[] (binaryType 'fragments').
    return data.map(part => textDecoder.decode(part)).join('');
  }
  if (typeof Blob !== 'undefined' && data instanceof Blob) return data.text();
  return String(data);
}

/**
 * Waits while the socket's send buffer is above `highWaterMark` bytes; no-op
 * for sockets without `bufferedAmount`. Polls, as there is no drain event.
 * @param {WebSocketLike} socket
 * @param {{highWaterMark?: number, pollIntervalMs?: number, abortSignal?: AbortSignal}} [options]
 */
async function waitForWebSocketBufferDrain(
  socket,
  { highWaterMark = 1024 * 1024, pollIntervalMs = 20, abortSignal } = {},
) {
  while (
    socket.readyState === WEBSOCKET_OPEN_STATE &&
    (socket.bufferedAmount ?? 0) > highWaterMark
  ) {
    if (abortSignal?.aborted === true) {
      return;
    }
    await new Promise(resolve => setTimeout(resolve, pollIntervalMs));
  }
}

/**
 * A ChatTransport (ai 6) over one persistent WebSocket, speaking ai 7's
 * WebSocketChatTransport frame protocol.
 *
 * @implements {ChatTransport}
 */
export class WebSocketChatTransport {
  /** Resumes are full replays from sequence 0 (Chat rebuilds the message). */
  resumeStreamIsReplay = true;

  /** @param {WebSocketChatTransportOptions} [options] */
  constructor(options = {}) {
    /** @private */ this.url = options.url;
    /** @private */ this.protocols = options.protocols;
    /** @private */ this.params = options.params;
    /** @private */ this.headers = options.headers;
    /** @private */ this.body = options.body;
    /** @private */ this.webSocket = options.WebSocket ?? options.webSocket;
    /** @private */ this.validate = options.validate ?? true;
    /** @private */ this.prepareSendMessagesRequest = options.prepareSendMessagesRequest;
    /** @private */ this.prepareReconnectToStreamRequest =
      options.prepareReconnectToStreamRequest;

    /**
     * @private
     * @type {{promise: Promise<WebSocketLike>, resolve: (s: WebSocketLike) => void,
     *   reject: (e: Error) => void, socket?: WebSocketLike, settled: boolean} | undefined}
     */
    this.connection = undefined;
    /** @private @type {Map<string, any>} */
    this.activeRequests = new Map();
    /** @private @type {Promise<void>} */
    this.sendQueue = Promise.resolve();
    /** @private */
    this.chunkSchema = undefined;
  }

  /**
   * Sends a `send` frame (opening the socket when needed) and returns the
   * stream of chunks correlated by a fresh requestId.
   * @param {Parameters<ChatTransport['sendMessages']>[0]} options
   * @returns {Promise<ReadableStream<UIMessageChunk>>}
   */
  async sendMessages({ abortSignal, ...options }) {
    this.throwIfAborted(abortSignal);

    const [resolvedHeaders, resolvedBody] = await Promise.all([
      resolveValue(this.headers),
      resolveValue(this.body),
    ]);
    this.throwIfAborted(abortSignal);

    const headers = {
      ...normalizeHeaders(resolvedHeaders),
      ...normalizeHeaders(options.headers),
    };
    const body = { ...resolvedBody, ...options.body };

    const preparedRequest = await this.prepareSendMessagesRequest?.({
      id: options.chatId,
      messages: options.messages,
      requestMetadata: options.metadata,
      body,
      headers,
      trigger: options.trigger,
      messageId: options.messageId,
    });
    this.throwIfAborted(abortSignal);

    const socket = await this.getSocket(abortSignal);
    const requestId = generateId();
    const request = this.createActiveRequest({
      requestId,
      kind: 'send',
      lastSequence: -1,
      abortSignal,
    });

    const frame = {
      type: 'send',
      requestId,
      id: options.chatId,
      trigger: options.trigger,
      messageId: options.messageId,
      messages: preparedRequest?.messages ?? options.messages,
      headers:
        preparedRequest?.headers == null
          ? headers
          : normalizeHeaders(preparedRequest.headers),
      body: preparedRequest?.body ?? body,
      metadata: options.metadata,
    };

    try {
      await this.sendFrame(socket, frame, abortSignal);
      return request.stream;
    } catch (error) {
      const requestError = asError(error);
      this.failRequest(request, requestError);
      throw requestError;
    }
  }

  /**
   * Sends a `resume` frame; resolves to the replayed stream on `start`, the
   * first `chunk` or `end`, and to null on `no-active`.
   * @param {Parameters<ChatTransport['reconnectToStream']>[0]} options
   * @returns {Promise<ReadableStream<UIMessageChunk> | null>}
   */
  async reconnectToStream(options) {
    this.throwIfAborted(options.abortSignal);

    const [resolvedHeaders, resolvedBody] = await Promise.all([
      resolveValue(this.headers),
      resolveValue(this.body),
    ]);
    this.throwIfAborted(options.abortSignal);

    const headers = {
      ...normalizeHeaders(resolvedHeaders),
      ...normalizeHeaders(options.headers),
    };
    const body = { ...resolvedBody, ...options.body };

    const preparedRequest = await this.prepareReconnectToStreamRequest?.({
      id: options.chatId,
      requestMetadata: options.metadata,
      body,
      headers,
    });
    this.throwIfAborted(options.abortSignal);

    const socket = await this.getSocket(options.abortSignal);
    const requestId = generateId();

    // The request can be aborted between registration and transmission: the
    // promise is marked handled now, the caller still gets the rejection below.
    /** @type {ReturnType<typeof deferred<ReadableStream<UIMessageChunk> | null>>} */
    const {
      promise: responsePromise,
      resolve: resolveResponse,
      reject: rejectResponse,
    } = deferred();

    const request = this.createActiveRequest({
      requestId,
      kind: 'resume',
      // Chat rebuilds a resumed message with a fresh parser: always ask for a
      // replay from the beginning.
      lastSequence: -1,
      abortSignal: options.abortSignal,
      resolveResponse,
      rejectResponse,
    });

    const frame = {
      type: 'resume',
      requestId,
      id: options.chatId,
      lastSequence: undefined,
      headers:
        preparedRequest?.headers == null
          ? headers
          : normalizeHeaders(preparedRequest.headers),
      body: preparedRequest?.body ?? body,
      metadata: options.metadata,
    };

    try {
      await this.sendFrame(socket, frame, options.abortSignal);
    } catch (error) {
      const requestError = asError(error);
      request.responseSettled = true;
      this.failRequest(request, requestError);
      throw requestError;
    }

    return responsePromise;
  }

  /**
   * Closes the current connection and errors any active response streams.
   * A later request opens a new connection.
   */
  close() {
    const error = new Error('WebSocket chat transport was closed.');
    const connection = this.connection;
    this.connection = undefined;
    this.failAllRequests(error);

    if (connection != null) {
      this.rejectConnection(connection, error);
      try {
        connection.socket?.close(1000, 'Client closed transport');
      } catch {
        // The socket may already be closed.
      }
    }
  }

  /** Number of requests waiting for frames (for tests and status displays). */
  get activeRequestCount() {
    return this.activeRequests.size;
  }

  /** True while a socket is open. */
  get connected() {
    return this.connection?.socket?.readyState === WEBSOCKET_OPEN_STATE;
  }

  /** @private @param {AbortSignal | undefined} abortSignal */
  throwIfAborted(abortSignal) {
    if (abortSignal?.aborted) {
      throw createAbortError(abortSignal);
    }
  }

  /**
   * @private
   * @param {AbortSignal | undefined} abortSignal
   * @returns {Promise<WebSocketLike>}
   */
  async getSocket(abortSignal) {
    const existingSocket = this.connection?.socket;
    if (existingSocket?.readyState === WEBSOCKET_OPEN_STATE) {
      return existingSocket;
    }

    if (this.connection == null) {
      // Failures reach callers through waitForConnection; a connection no
      // request waits on any more must not raise an unhandled rejection.
      /** @type {ReturnType<typeof deferred<WebSocketLike>>} */
      const { promise, resolve, reject } = deferred();

      const connection = {
        promise,
        resolve,
        reject,
        socket: undefined,
        settled: false,
      };
      this.connection = connection;
      void this.initializeConnection(connection);
    }

    const connection = this.connection;
    if (connection == null) {
      throw new Error('Failed to initialize WebSocket connection.');
    }

    return this.waitForConnection(connection.promise, abortSignal);
  }

  /** @private @param {NonNullable<WebSocketChatTransport['connection']>} connection */
  async initializeConnection(connection) {
    try {
      const params = await resolveValue(this.params);
      if (this.connection !== connection) {
        return;
      }

      const url = this.buildUrl(params);
      const WebSocketConstructor = this.webSocket ?? globalThis.WebSocket;
      if (WebSocketConstructor == null) {
        throw new Error(
          'No WebSocket implementation available: pass the `WebSocket` option.',
        );
      }
      const socket = /** @type {WebSocketLike} */ (
        new WebSocketConstructor(url.toString(), this.protocols)
      );
      connection.socket = socket;

      /** @type {Promise<void>} */
      let messageTail = Promise.resolve();

      socket.onopen = () => {
        if (this.connection !== connection) {
          return;
        }
        this.resolveConnection(connection, socket);
      };

      socket.onmessage = event => {
        messageTail = messageTail
          .then(() => readWebSocketMessageText(event.data))
          .then(text => this.handleResponseFrame(connection, text))
          .catch(error => {
            this.terminateConnection(connection, asError(error));
          });
      };

      socket.onerror = () => {
        this.terminateConnection(
          connection,
          new TypeError('WebSocket chat network connection failed.'),
        );
      };

      socket.onclose = event => {
        messageTail = messageTail
          .then(() => {
            if (this.connection !== connection) {
              return;
            }
            const closeEvent = /** @type {{code?: unknown, reason?: unknown} | null | undefined} */ (
              event
            );
            const code =
              typeof closeEvent?.code === 'number' ? closeEvent.code : undefined;
            const reason =
              typeof closeEvent?.reason === 'string' && closeEvent.reason !== ''
                ? `: ${closeEvent.reason}`
                : '';
            this.terminateConnection(
              connection,
              new TypeError(
                `WebSocket chat network connection closed${
                  code == null ? '' : ` (code ${code}${reason})`
                }.`,
              ),
              false,
            );
          })
          .catch(error => {
            this.terminateConnection(connection, asError(error));
          });
      };
    } catch (error) {
      this.terminateConnection(connection, asError(error), false);
    }
  }

  /**
   * @private
   * @param {Record<string, string> | undefined} params
   * @returns {URL}
   */
  buildUrl(params) {
    /** @type {URL} */
    let url;
    try {
      const baseUrl =
        typeof globalThis.location === 'undefined'
          ? undefined
          : globalThis.location.href;
      const target = this.url ?? defaultWebSocketUrl();
      if (target == null) {
        throw new Error('no url');
      }
      url = new URL(target, baseUrl);
      if (url.protocol === 'http:') url.protocol = 'ws:';
      else if (url.protocol === 'https:') url.protocol = 'wss:';
    } catch {
      throw new Error(
        'Invalid WebSocket chat URL. Use an absolute URL outside the browser.',
      );
    }

    if (!['ws:', 'wss:'].includes(url.protocol) || url.hostname === '') {
      throw new Error('Invalid WebSocket chat URL. Expected ws:// or wss://.');
    }
    if (url.hash !== '') {
      throw new Error('Invalid WebSocket chat URL. Fragments are not allowed.');
    }

    for (const [key, value] of Object.entries(params ?? {})) {
      url.searchParams.set(key, value);
    }

    return url;
  }

  /**
   * @private
   * @param {Promise<WebSocketLike>} promise
   * @param {AbortSignal | undefined} abortSignal
   * @returns {Promise<WebSocketLike>}
   */
  waitForConnection(promise, abortSignal) {
    if (abortSignal == null) {
      return promise;
    }
    if (abortSignal.aborted) {
      return Promise.reject(createAbortError(abortSignal));
    }

    return new Promise((resolve, reject) => {
      const onAbort = () => {
        reject(createAbortError(abortSignal));
      };
      abortSignal.addEventListener('abort', onAbort, { once: true });

      void promise.then(
        socket => {
          abortSignal.removeEventListener('abort', onAbort);
          resolve(socket);
        },
        error => {
          abortSignal.removeEventListener('abort', onAbort);
          reject(error);
        },
      );
    });
  }

  /** @private */
  resolveConnection(connection, socket) {
    if (connection.settled) {
      return;
    }
    connection.settled = true;
    connection.resolve(socket);
  }

  /** @private */
  rejectConnection(connection, error) {
    if (connection.settled) {
      return;
    }
    connection.settled = true;
    connection.reject(error);
  }

  /**
   * Drops the connection, errors every active request and (unless the socket
   * is already closing) closes the socket with 1011.
   * @private
   */
  terminateConnection(connection, error, closeSocket = true) {
    if (this.connection !== connection) {
      return;
    }

    this.connection = undefined;
    this.rejectConnection(connection, error);
    this.failAllRequests(error);

    if (closeSocket) {
      try {
        connection.socket?.close(1011, 'WebSocket chat transport error');
      } catch {
        // The socket may already be closed.
      }
    }
  }

  /** @private */
  createActiveRequest({
    requestId,
    kind,
    lastSequence,
    abortSignal,
    resolveResponse,
    rejectResponse,
  }) {
    /** @type {ReadableStreamDefaultController<UIMessageChunk>} */
    let controller = /** @type {any} */ (undefined);
    /** @type {ReadableStream<UIMessageChunk>} */
    const stream = new ReadableStream({
      start(streamController) {
        controller = streamController;
      },
      cancel: () => {
        this.abortRequest(requestId, false);
      },
    });

    const request = {
      requestId,
      kind,
      lastSequence,
      stream,
      controller,
      responseSettled: false,
      resolveResponse,
      rejectResponse,
      abortSignal,
      /** @type {(() => void) | undefined} */
      abortListener: undefined,
    };
    this.activeRequests.set(requestId, request);

    if (abortSignal != null) {
      const abortListener = () => {
        this.abortRequest(requestId, true);
      };
      request.abortListener = abortListener;
      abortSignal.addEventListener('abort', abortListener, { once: true });
      if (abortSignal.aborted) {
        abortListener();
      }
    }

    return request;
  }

  /**
   * Stops a request locally and sends an `abort` frame (best effort).
   * @private
   * @param {string} requestId
   * @param {boolean} closeStream
   */
  abortRequest(requestId, closeStream) {
    const request = this.activeRequests.get(requestId);
    if (request == null) {
      return;
    }

    const error = createAbortError(request.abortSignal);
    if (request.kind === 'resume' && !request.responseSettled) {
      request.responseSettled = true;
      request.rejectResponse?.(error);
    }

    this.cleanupRequest(request);
    if (closeStream) {
      try {
        request.controller.close();
      } catch {
        // The stream may already be closed or canceled.
      }
    }

    const socket = this.connection?.socket;
    if (socket?.readyState === WEBSOCKET_OPEN_STATE) {
      void this.sendFrame(socket, { type: 'abort', requestId }).catch(() => {
        // Aborting is best-effort once the local stream has been closed.
      });
    }
  }

  /** @private */
  cleanupRequest(request) {
    this.activeRequests.delete(request.requestId);
    if (request.abortListener != null) {
      request.abortSignal?.removeEventListener('abort', request.abortListener);
      request.abortListener = undefined;
    }
  }

  /** @private */
  failRequest(request, error) {
    if (!this.activeRequests.has(request.requestId)) {
      return;
    }

    if (request.kind === 'resume' && !request.responseSettled) {
      request.responseSettled = true;
      request.rejectResponse?.(error);
    }
    this.cleanupRequest(request);
    try {
      request.controller.error(error);
    } catch {
      // The stream may already be closed or canceled.
    }
  }

  /** @private @param {Error} error */
  failAllRequests(error) {
    for (const request of [...this.activeRequests.values()]) {
      this.failRequest(request, error);
    }
  }

  /** @private */
  resolveResumeStream(request) {
    if (request.kind !== 'resume' || request.responseSettled) {
      return;
    }
    request.responseSettled = true;
    request.resolveResponse?.(request.stream);
  }

  /**
   * @private
   * @param {unknown} value
   * @returns {Promise<UIMessageChunk>}
   */
  async validateResponseChunk(value) {
    if (!this.validate) {
      if (!isRecord(value) || typeof value.type !== 'string') {
        throw new Error('Invalid UI message chunk in WebSocket response.');
      }
      return /** @type {UIMessageChunk} */ (value);
    }
    this.chunkSchema ??= asSchema(uiMessageChunkSchema);
    /** @type {any} */
    let result;
    try {
      result = await this.chunkSchema.validate(value);
    } catch {
      result = { success: false };
    }
    if (!result?.success) {
      throw new Error('Invalid UI message chunk in WebSocket response.');
    }
    return result.value;
  }

  /**
   * Routes one server frame. Throwing tears the connection down.
   * @private
   * @param {object} connection
   * @param {string} text
   */
  async handleResponseFrame(connection, text) {
    if (this.connection !== connection) {
      return;
    }

    /** @type {unknown} */
    let value;
    try {
      value = JSON.parse(text);
    } catch {
      throw new Error('Invalid WebSocket chat response frame.');
    }
    if (!isRecord(value)) {
      throw new Error('Invalid WebSocket chat response frame.');
    }

    const type = value.type;
    const requestId = value.requestId;
    if (typeof type !== 'string' || typeof requestId !== 'string') {
      throw new Error('Invalid WebSocket chat response frame.');
    }

    const request = this.activeRequests.get(requestId);
    if (request == null) {
      return;
    }

    switch (type) {
      case 'start': {
        this.resolveResumeStream(request);
        return;
      }

      case 'chunk': {
        const sequence = value.sequence;
        if (!isSequence(sequence)) {
          throw new Error('Invalid WebSocket chat chunk sequence.');
        }
        if (sequence <= request.lastSequence) {
          return;
        }
        if (sequence !== request.lastSequence + 1) {
          throw new Error('Out-of-order WebSocket chat chunk sequence.');
        }

        const chunk = await this.validateResponseChunk(value.chunk);

        // Validation is asynchronous: the request may have been aborted or
        // canceled meanwhile. Ignore the stale frame instead of touching a
        // closed controller and tearing down the shared connection.
        if (this.activeRequests.get(requestId) !== request) {
          return;
        }

        this.resolveResumeStream(request);
        try {
          request.controller.enqueue(chunk);
        } catch {
          // The stream may already be closed or canceled.
          return;
        }
        request.lastSequence = sequence;
        return;
      }

      case 'end': {
        this.resolveResumeStream(request);
        this.cleanupRequest(request);
        request.controller.close();
        return;
      }

      case 'no-active': {
        if (request.kind === 'resume' && !request.responseSettled) {
          request.responseSettled = true;
          request.resolveResponse?.(null);
        }
        this.cleanupRequest(request);
        request.controller.close();
        return;
      }

      case 'error': {
        if (value.errorText !== undefined && typeof value.errorText !== 'string') {
          throw new Error('Invalid WebSocket chat error response.');
        }
        this.failRequest(
          request,
          new Error(
            /** @type {string | undefined} */ (value.errorText) ??
              'WebSocket chat server returned an error.',
          ),
        );
        return;
      }

      default:
        throw new Error(`Unknown WebSocket chat response type: ${type}.`);
    }
  }

  /**
   * Sends a frame after the previous ones (serialised, back-pressured).
   * @private
   * @param {WebSocketLike} socket
   * @param {object} frame
   * @param {AbortSignal} [abortSignal]
   * @returns {Promise<void>}
   */
  sendFrame(socket, frame, abortSignal) {
    const send = this.sendQueue.then(async () => {
      await waitForWebSocketBufferDrain(socket, { abortSignal });
      this.throwIfAborted(abortSignal);

      if (
        this.connection?.socket !== socket ||
        socket.readyState !== WEBSOCKET_OPEN_STATE
      ) {
        throw new TypeError('WebSocket chat network connection is not open.');
      }

      socket.send(JSON.stringify(frame));
    });
    this.sendQueue = send.catch(() => {});
    return send;
  }
}

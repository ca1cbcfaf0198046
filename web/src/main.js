/**
 * The gateway's chat page: vanilla JS on ai 6's `AbstractChat` (no React).
 *
 * - Transport switch: SSE (`DefaultChatTransport`, POST /api/chat) or
 *   WebSocket (`WebSocketChatTransport`, /api/chat/ws); the choice is kept in
 *   localStorage.
 * - The chat id and the messages are kept in sessionStorage, and the page
 *   calls `chat.resumeStream()` on load, so a reload resumes an active
 *   response (the `resume: true` behaviour of `useChat`).
 * - Browser tools of the demo agent (`change_bgm`, `get_location`) run here,
 *   once their approval is approved (the gateway then re-announces the call
 *   with `tool-input-available`).
 * - Sign-in: on load the page asks `GET /api/me` who it is. When the gateway
 *   answers 401 (auth `jwt` or `api-keys`), a small form asks for an access
 *   token (a JWT or an API key), kept in sessionStorage. The token goes out as
 *   `Authorization: Bearer` on HTTP (chat, resume, stop) and as
 *   `?access_token=` on the WebSocket URL (the transport's `params`); frame
 *   headers never carry it. A chat request answered 401 later (an expired
 *   token) clears it and shows the form again. With auth `none` the gateway
 *   answers 200 without a token and the page never asks.
 * - Exposes `window.__chat` (the current chat) and `window.__ready` (set once
 *   signed in and the chat is created).
 */

import {
  AbstractChat,
  DefaultChatTransport,
  generateId,
  getToolOrDynamicToolName,
  isToolOrDynamicToolUIPart,
} from 'ai';
import { sendAutomaticallyWhen } from './predicates.js';
import { WebSocketChatTransport } from './ws-transport.js';

/** @typedef {import('ai').UIMessage} UIMessage */
/** @typedef {import('ai').ChatStatus} ChatStatus */

const STORAGE = {
  transport: 'adk-gateway.transport',
  chatId: 'adk-gateway.chatId',
  messages: (/** @type {string} */ id) => `adk-gateway.messages.${id}`,
  token: 'adk-gateway-token',
};

const QUICK_COMMANDS = [
  '/echo hello',
  '/stream 20 50',
  '/tool get_weather {"location":"Paris"}',
  '/tool process_payment {"amount": 5, "recipient": "bob"}',
  '/tool change_bgm {"track": 2}',
  '/think why',
  '/image',
];

/** Approval buttons: label, test id, the decision sent to the gateway. */
const APPROVAL_BUTTONS = [
  { label: 'Allow once', testid: 'approve-once', approved: true, reason: undefined },
  { label: 'Always allow', testid: 'approve-always', approved: true, reason: 'always' },
  { label: 'Deny', testid: 'deny', approved: false, reason: undefined },
  { label: 'Deny and stop', testid: 'deny-stop', approved: false, reason: 'stop' },
  { label: 'Never allow', testid: 'never', approved: false, reason: 'never' },
];

// ---------------------------------------------------------------------------
// Storage helpers (storage can be unavailable, e.g. in private modes).

function storageGet(/** @type {Storage} */ storage, /** @type {string} */ key) {
  try {
    return storage.getItem(key);
  } catch {
    return null;
  }
}

function storageSet(
  /** @type {Storage} */ storage,
  /** @type {string} */ key,
  /** @type {string | null} */ value,
) {
  try {
    if (value == null) storage.removeItem(key);
    else storage.setItem(key, value);
  } catch {
    // Quota or privacy mode: the page still works without persistence.
  }
}

/** @returns {UIMessage[]} */
function loadMessages(/** @type {string} */ chatId) {
  const raw = storageGet(sessionStorage, STORAGE.messages(chatId));
  if (!raw) return [];
  try {
    const messages = JSON.parse(raw);
    return Array.isArray(messages) ? messages : [];
  } catch {
    return [];
  }
}

function saveMessages(/** @type {string} */ chatId, /** @type {UIMessage[]} */ messages) {
  storageSet(sessionStorage, STORAGE.messages(chatId), JSON.stringify(messages));
}

// ---------------------------------------------------------------------------
// Chat state: the `ChatState` interface of ai 6, observable.

/**
 * @implements {import('ai').ChatState<UIMessage>}
 */
class ObservableChatState {
  /** @param {UIMessage[]} messages */
  constructor(messages = []) {
    /** @type {UIMessage[]} */
    this._messages = messages;
    /** @type {ChatStatus} */
    this._status = 'ready';
    /** @type {Error | undefined} */
    this._error = undefined;
    /** @type {Set<(what: 'messages' | 'status' | 'error') => void>} */
    this.listeners = new Set();
  }

  get messages() {
    return this._messages;
  }

  set messages(messages) {
    this._messages = [...messages];
    this.notify('messages');
  }

  get status() {
    return this._status;
  }

  set status(status) {
    this._status = status;
    this.notify('status');
  }

  get error() {
    return this._error;
  }

  set error(error) {
    this._error = error;
    this.notify('error');
  }

  /** @param {UIMessage} message */
  pushMessage = message => {
    this._messages = this._messages.concat(this.snapshot(message));
    this.notify('messages');
  };

  popMessage = () => {
    this._messages = this._messages.slice(0, -1);
    this.notify('messages');
  };

  /** @param {number} index @param {UIMessage} message */
  replaceMessage = (index, message) => {
    // Chat mutates its streaming message in place: store a copy so each
    // update is a new object (the renderer compares identities).
    this._messages = [
      ...this._messages.slice(0, index),
      this.snapshot(message),
      ...this._messages.slice(index + 1),
    ];
    this.notify('messages');
  };

  /** @template T @param {T} value @returns {T} */
  snapshot = value => structuredClone(value);

  /** @param {(what: 'messages' | 'status' | 'error') => void} listener */
  subscribe(listener) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** @param {'messages' | 'status' | 'error'} what */
  notify(what) {
    for (const listener of this.listeners) listener(what);
  }
}

/** A Chat whose state re-renders the page. */
class PageChat extends AbstractChat {
  /**
   * @param {import('ai').ChatInit<UIMessage> & {messages?: UIMessage[]}} init
   */
  constructor({ messages, ...init }) {
    const state = new ObservableChatState(messages);
    super({ ...init, state });
    /** @type {ObservableChatState} */
    this.observable = state;
  }
}

// ---------------------------------------------------------------------------
// Browser tools of the demo agent.

const FAKE_LOCATION = { latitude: 35.68, longitude: 139.76, accuracy: 10 };
const GEOLOCATION_TIMEOUT_MS = 1500;

/** @returns {Promise<{latitude: number, longitude: number, accuracy: number}>} */
async function getLocation() {
  const geolocation = globalThis.navigator?.geolocation;
  if (geolocation == null) return FAKE_LOCATION;
  try {
    const permission = await navigator.permissions?.query({ name: 'geolocation' });
    if (permission?.state === 'denied') return FAKE_LOCATION;
  } catch {
    // No Permissions API: just ask, with the deadline below.
  }
  return new Promise(resolve => {
    const timer = setTimeout(() => resolve(FAKE_LOCATION), GEOLOCATION_TIMEOUT_MS);
    const done = (/** @type {typeof FAKE_LOCATION} */ value) => {
      clearTimeout(timer);
      resolve(value);
    };
    try {
      geolocation.getCurrentPosition(
        position =>
          done({
            latitude: position.coords.latitude,
            longitude: position.coords.longitude,
            accuracy: position.coords.accuracy,
          }),
        () => done(FAKE_LOCATION),
        { timeout: GEOLOCATION_TIMEOUT_MS, maximumAge: 10 * 60 * 1000 },
      );
    } catch {
      done(FAKE_LOCATION);
    }
  });
}

/** @param {{track?: unknown}} input */
function changeBgm(input) {
  const track = input?.track;
  const element = document.getElementById('now-playing');
  if (element) {
    element.hidden = false;
    element.textContent = `\u266A now playing track ${track}`;
  }
  return { playing: track };
}

/**
 * Tools the page runs. `needsApproval` mirrors the demo agent: such a tool
 * runs only when its part carries an approved approval.
 * @type {Record<string, {needsApproval: boolean, run: (input: any) => unknown}>}
 */
const BROWSER_TOOLS = {
  change_bgm: { needsApproval: true, run: changeBgm },
  get_location: { needsApproval: true, run: getLocation },
};

/** toolCallIds already run by this page (a replay re-announces calls). */
const executedToolCalls = new Set();

/**
 * The tool parts with this toolCallId, in every message.
 * @param {UIMessage[]} messages
 * @param {string} toolCallId
 */
function findToolParts(messages, toolCallId) {
  const parts = [];
  for (const message of messages) {
    for (const part of message.parts) {
      if (isToolOrDynamicToolUIPart(part) && part.toolCallId === toolCallId) {
        parts.push(part);
      }
    }
  }
  return parts;
}

/**
 * Runs a browser tool (never awaited by the caller) and reports its output.
 * @param {PageChat} chat
 * @param {{toolName: string, toolCallId: string, input: unknown}} call
 */
function runBrowserTool(chat, call) {
  const tool = BROWSER_TOOLS[call.toolName];
  if (tool == null || executedToolCalls.has(call.toolCallId)) return;
  executedToolCalls.add(call.toolCallId);
  Promise.resolve()
    .then(() => tool.run(call.input))
    .then(
      output =>
        chat.addToolOutput({ tool: call.toolName, toolCallId: call.toolCallId, output }),
      error =>
        chat.addToolOutput({
          tool: call.toolName,
          toolCallId: call.toolCallId,
          state: 'output-error',
          errorText: error instanceof Error ? error.message : String(error),
        }),
    )
    .catch(error => console.error('addToolOutput failed', error));
}

/**
 * onToolCall: fires on every `tool-input-available` without
 * `providerExecuted`. A tool that needs approval is first announced before
 * its approval request (skip it), then re-announced by the gateway after the
 * approval: run it then. Never await here (Chat's job queue would deadlock).
 * @param {PageChat} chat
 * @param {{toolCall: {toolName: string, toolCallId: string, input: unknown, dynamic?: boolean}}} options
 */
function handleToolCall(chat, { toolCall }) {
  const tool = BROWSER_TOOLS[toolCall.toolName];
  if (tool == null) return;
  if (tool.needsApproval && !alwaysAllowed(chat.messages, toolCall.toolName)) {
    const parts = findToolParts(chat.messages, toolCall.toolCallId);
    const approved = parts.some(part => part.approval?.approved === true);
    if (!approved) return;
  }
  runBrowserTool(chat, toolCall);
}

/**
 * Whether the user chose "Always allow" for this tool earlier in the chat. The
 * gateway then announces later calls without asking (ai 6 has no chunk to say
 * "approved automatically"), so the page runs them at once.
 * @param {import('ai').UIMessage[]} messages
 * @param {string} toolName
 */
function alwaysAllowed(messages, toolName) {
  return messages.some(message =>
    message.parts.some(
      part =>
        isToolOrDynamicToolUIPart(part) &&
        getToolOrDynamicToolName(part) === toolName &&
        /** @type {any} */ (part).approval?.approved === true &&
        /** @type {any} */ (part).approval?.reason === 'always',
    ),
  );
}

/**
 * After a reload: approved browser tool calls whose output was never added
 * (the page closed in between) are run now.
 * @param {PageChat} chat
 */
function runPendingBrowserTools(chat) {
  const last = chat.lastMessage;
  if (last?.role !== 'assistant') return;
  for (const part of last.parts) {
    if (!isToolOrDynamicToolUIPart(part) || part.providerExecuted) continue;
    const toolName = getToolOrDynamicToolName(part);
    const tool = BROWSER_TOOLS[toolName];
    if (tool == null || part.state !== 'input-available') continue;
    if (tool.needsApproval && part.approval?.approved !== true && !alwaysAllowed(chat.messages, toolName)) continue;
    runBrowserTool(chat, { toolName, toolCallId: part.toolCallId, input: part.input });
  }
}

// ---------------------------------------------------------------------------
// Rendering.

/**
 * @param {string} tag
 * @param {Record<string, string | boolean | undefined>} [attrs]
 * @param {(Node | string | null | undefined)[]} [children]
 * @returns {HTMLElement}
 */
function h(tag, attrs = {}, children = []) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === false) continue;
    if (key === 'class') element.className = String(value);
    else if (key === 'text') element.textContent = String(value);
    else element.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children) {
    if (child == null) continue;
    element.append(child);
  }
  return element;
}

/** @param {unknown} value */
function formatJson(value) {
  if (value === undefined) return '';
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

/** `<details>` elements the user opened, by key, kept across re-renders. */
const openDetails = new Set();

/**
 * @param {string} key
 * @param {string} summary
 * @param {Node[]} body
 * @param {Record<string, string>} [attrs]
 */
function collapsible(key, summary, body, attrs = {}) {
  const details = h('details', attrs, [h('summary', { text: summary }), ...body]);
  if (openDetails.has(key)) details.open = true;
  details.addEventListener('toggle', () => {
    if (details.open) openDetails.add(key);
    else openDetails.delete(key);
  });
  return details;
}

/**
 * @param {any} part a tool or dynamic-tool part
 * @param {string} key
 */
function renderToolPart(part, key) {
  const toolName = getToolOrDynamicToolName(part);
  const where = part.providerExecuted ? 'server' : 'browser';
  const children = [
    h('div', { class: 'tool-head' }, [
      h('span', { class: 'tool-name', text: toolName }),
      h('span', { class: `badge state-${part.state}`, 'data-testid': 'tool-state', text: part.state }),
      h('span', { class: 'badge muted', text: where }),
    ]),
  ];
  if (part.title) children.push(h('div', { class: 'muted', text: part.title }));
  if (part.input !== undefined) {
    children.push(h('div', { class: 'label', text: 'input' }));
    children.push(h('pre', { class: 'json', 'data-testid': 'tool-input', text: formatJson(part.input) }));
  }
  if (part.state === 'output-available') {
    children.push(h('div', { class: 'label', text: part.preliminary ? 'output (preliminary)' : 'output' }));
    children.push(h('pre', { class: 'json', 'data-testid': 'tool-output', text: formatJson(part.output) }));
  }
  if (part.state === 'output-error') {
    children.push(h('div', { class: 'tool-error', 'data-testid': 'tool-error', text: part.errorText ?? 'error' }));
  }
  if (part.approval != null && part.approval.approved !== undefined) {
    const decision = part.approval.approved ? 'approved' : 'denied';
    const reason = part.approval.reason ? ` (${part.approval.reason})` : '';
    children.push(
      h('div', {
        class: part.approval.approved ? 'approval-decision' : 'approval-decision tool-denied',
        'data-testid': 'approval-decision',
        text: `${decision}${reason}`,
      }),
    );
  } else if (part.state === 'output-denied') {
    children.push(h('div', { class: 'tool-denied', text: 'denied' }));
  }
  if (part.state === 'approval-requested' && part.approval?.id) {
    const approvalId = part.approval.id;
    const buttons = APPROVAL_BUTTONS.map(button => {
      const element = h('button', {
        type: 'button',
        class: button.approved ? 'approve' : 'deny',
        'data-testid': button.testid,
        'data-approval-id': approvalId,
        text: button.label,
      });
      element.addEventListener('click', () => {
        for (const sibling of element.parentElement?.querySelectorAll('button') ?? []) {
          /** @type {HTMLButtonElement} */ (sibling).disabled = true;
        }
        const chat = currentChat;
        if (chat == null) return;
        Promise.resolve(
          chat.addToolApprovalResponse({
            id: approvalId,
            approved: button.approved,
            ...(button.reason != null ? { reason: button.reason } : {}),
          }),
        ).catch(error => console.error('addToolApprovalResponse failed', error));
      });
      return element;
    });
    children.push(h('div', { class: 'approval-buttons', 'data-testid': 'approval-buttons' }, buttons));
  }
  return h(
    'div',
    {
      class: `tool-part state-${part.state}`,
      'data-testid': 'tool-part',
      'data-tool-name': toolName,
      'data-tool-call-id': part.toolCallId,
      'data-state': part.state,
      'data-key': key,
    },
    children,
  );
}

/**
 * @param {any} part
 * @param {string} key
 * @returns {Node | null}
 */
function renderPart(part, key) {
  switch (part.type) {
    case 'text':
      return h('div', { class: 'text-part', 'data-testid': 'text-part', 'data-state': part.state, text: part.text });
    case 'reasoning':
      return collapsible(
        key,
        part.state === 'streaming' ? 'Thinking\u2026' : 'Reasoning',
        [h('div', { class: 'reasoning-text', text: part.text })],
        { class: 'reasoning-part', 'data-testid': 'reasoning-part' },
      );
    case 'file': {
      if (typeof part.mediaType === 'string' && part.mediaType.startsWith('image/')) {
        return h('figure', { class: 'file-part', 'data-testid': 'file-part' }, [
          h('img', { src: part.url, alt: part.filename ?? 'image', 'data-testid': 'image' }),
          part.filename ? h('figcaption', { text: part.filename }) : null,
        ]);
      }
      return h('div', { class: 'file-part', 'data-testid': 'file-part' }, [
        h('a', { href: part.url, download: part.filename ?? true, text: part.filename ?? part.mediaType }),
      ]);
    }
    case 'source-url':
      return h('div', { class: 'source-part' }, [
        h('a', { href: part.url, target: '_blank', rel: 'noreferrer noopener', text: part.title ?? part.url }),
      ]);
    case 'source-document':
      return h('div', { class: 'source-part muted', text: `source: ${part.title ?? part.sourceId}` });
    case 'step-start':
      return null;
    default:
      if (isToolOrDynamicToolUIPart(part)) return renderToolPart(part, key);
      if (typeof part.type === 'string' && part.type.startsWith('data-')) {
        return collapsible(key, part.type, [h('pre', { class: 'json', text: formatJson(part.data) })], {
          class: 'data-part',
        });
      }
      return null;
  }
}

/** @param {UIMessage} message */
function renderMessage(message) {
  const parts = [];
  let steps = 0;
  message.parts.forEach((part, index) => {
    if (part.type === 'step-start') {
      if (steps++ > 0) parts.push(h('hr', { class: 'step-divider' }));
      return;
    }
    const element = renderPart(part, `${message.id}:${index}`);
    if (element) parts.push(element);
  });
  return h(
    'article',
    {
      class: `message ${message.role}`,
      'data-testid': 'message',
      'data-role': message.role,
      'data-message-id': message.id,
    },
    [h('div', { class: 'role', text: message.role }), h('div', { class: 'parts' }, parts)],
  );
}

/** message id -> {message object, element}; a message re-renders when its object changes. */
const renderedMessages = new Map();

function renderMessages() {
  const container = /** @type {HTMLElement} */ (document.getElementById('messages'));
  const chat = currentChat;
  if (chat == null) return;
  const nearBottom =
    container.scrollHeight - container.scrollTop - container.clientHeight < 80;

  const seen = new Set();
  /** @type {HTMLElement[]} */
  const elements = [];
  for (const message of chat.messages) {
    seen.add(message.id);
    let entry = renderedMessages.get(message.id);
    if (entry == null || entry.message !== message) {
      const element = renderMessage(message);
      entry?.element.replaceWith(element);
      entry = { message, element };
      renderedMessages.set(message.id, entry);
    }
    elements.push(entry.element);
  }
  for (const id of [...renderedMessages.keys()]) {
    if (!seen.has(id)) {
      renderedMessages.get(id).element.remove();
      renderedMessages.delete(id);
    }
  }
  // Put the elements in message order (appends move existing nodes).
  let previous = null;
  for (const element of elements) {
    const expected = previous ? previous.nextElementSibling : container.firstElementChild;
    if (expected !== element) {
      if (previous) previous.after(element);
      else container.prepend(element);
    }
    previous = element;
  }
  // Drop anything else (the noscript placeholder, stale nodes).
  while (previous ? previous.nextSibling : container.firstChild) {
    (previous ? previous.nextSibling : container.firstChild)?.remove();
  }

  if (nearBottom) container.scrollTop = container.scrollHeight;
}

/** Send and the quick commands wait while a response runs or a token is asked for. */
function renderComposer() {
  const status = currentChat?.status;
  const locked = status === 'submitted' || status === 'streaming' || authNeeded;
  /** @type {HTMLButtonElement} */ (document.getElementById('send')).disabled = locked;
  for (const button of document.querySelectorAll('#quick button')) {
    /** @type {HTMLButtonElement} */ (button).disabled = locked;
  }
}

function renderStatus() {
  const chat = currentChat;
  if (chat == null) return;
  const status = chat.status;
  const busy = status === 'submitted' || status === 'streaming';
  const statusElement = /** @type {HTMLElement} */ (document.getElementById('status'));
  statusElement.textContent = status;
  statusElement.dataset.status = status;
  statusElement.className = `status-${status}`;
  document.body.dataset.status = status;

  /** @type {HTMLButtonElement} */ (document.getElementById('stop')).disabled = !busy;
  renderComposer();

  const idElement = /** @type {HTMLElement} */ (document.getElementById('chat-id'));
  idElement.textContent = `chat ${chat.id} \u00b7 ${transportKind === 'ws' ? 'WebSocket' : 'SSE'}`;

  const errorElement = /** @type {HTMLElement} */ (document.getElementById('error'));
  const error = chat.error;
  if (error) {
    errorElement.hidden = false;
    errorElement.textContent = `Error: ${error.message || error.name || 'request failed'}`;
  } else {
    errorElement.hidden = true;
    errorElement.textContent = '';
  }
}

let renderScheduled = false;

function scheduleRender() {
  if (renderScheduled) return;
  renderScheduled = true;
  const run = () => {
    renderScheduled = false;
    renderMessages();
    renderStatus();
  };
  if (document.hidden || typeof requestAnimationFrame !== 'function') setTimeout(run, 0);
  else requestAnimationFrame(run);
}

// ---------------------------------------------------------------------------
// Sign-in: the access token and GET /api/me.

/** The access token (JWT or API key), or null when none was given. */
let accessToken = storageGet(sessionStorage, STORAGE.token) || null;
/** The gateway's auth mode from /api/me (`none`, `jwt`, `api-keys`), once known. */
let authMode = /** @type {string | undefined} */ (undefined);
/** True while the token form is shown: sending waits for a token. */
let authNeeded = false;
/** Settles when a sign-in started by a refused chat request is done. */
let pendingSignIn = /** @type {Promise<void> | undefined} */ (undefined);
/** Resolves the token form's pending question with the token entered. */
let tokenWaiter = /** @type {((token: string) => void) | undefined} */ (undefined);

/**
 * Stores the token (or forgets it). The WebSocket's user is fixed when it
 * connects, so an open socket is closed: the next request reconnects with
 * the new `access_token`.
 * @param {string | null} token
 */
function setToken(token) {
  if (token === accessToken) return;
  accessToken = token;
  storageSet(sessionStorage, STORAGE.token, token);
  wsTransport?.close();
}

/** The Authorization header for HTTP requests; empty without a token. */
function authHeaders() {
  /** @type {Record<string, string>} */
  const headers = {};
  if (accessToken) headers.Authorization = `Bearer ${accessToken}`;
  return headers;
}

/** The WebSocket URL's query parameters: `access_token` when a token is set. */
function wsParams() {
  /** @type {Record<string, string>} */
  const params = {};
  if (accessToken) params.access_token = accessToken;
  return params;
}

/**
 * The message of a gateway error body (`{"error": {"message"}}`), else the text.
 * @param {Response} response
 */
async function errorMessage(response) {
  const text = await response.text().catch(() => '');
  try {
    const message = JSON.parse(text)?.error?.message;
    if (typeof message === 'string' && message) return message;
  } catch {
    // Not JSON: the text itself.
  }
  return text || `HTTP ${response.status}`;
}

/**
 * GET /api/me with the current token.
 * - `ok`: the gateway knows the user (or needs no token).
 * - `unauthorized`: 401; `message` says why when a token was sent.
 * - `unavailable`: anything else (a network error, a gateway without
 *   /api/me): the page goes on without a user.
 * @returns {Promise<{kind: 'ok', user: string, auth: string}
 *   | {kind: 'unauthorized', message: string}
 *   | {kind: 'unavailable'}>}
 */
async function fetchMe() {
  /** @type {Response} */
  let response;
  try {
    response = await fetch('/api/me', { headers: authHeaders(), cache: 'no-store' });
  } catch {
    return { kind: 'unavailable' };
  }
  if (response.status === 401) {
    const message = accessToken ? `Token refused: ${await errorMessage(response)}` : '';
    return { kind: 'unauthorized', message };
  }
  if (!response.ok) return { kind: 'unavailable' };
  try {
    const me = await response.json();
    return { kind: 'ok', user: String(me?.user ?? ''), auth: String(me?.auth ?? '') };
  } catch {
    return { kind: 'unavailable' };
  }
}

/**
 * Shows the token form (with `problem` under it, if any) and resolves with
 * the next token entered.
 * @param {string} problem
 * @returns {Promise<string>}
 */
function askForToken(problem) {
  authNeeded = true;
  const form = /** @type {HTMLFormElement} */ (document.getElementById('auth-form'));
  const input = /** @type {HTMLInputElement} */ (document.getElementById('auth-token'));
  const error = /** @type {HTMLElement} */ (document.getElementById('auth-error'));
  const button = /** @type {HTMLButtonElement} */ (document.getElementById('auth-submit'));
  error.textContent = problem;
  error.hidden = !problem;
  button.disabled = false;
  form.hidden = false;
  input.focus();
  renderComposer();
  return new Promise(resolve => {
    tokenWaiter = resolve;
  });
}

function hideTokenForm() {
  authNeeded = false;
  /** @type {HTMLFormElement} */ (document.getElementById('auth-form')).hidden = true;
  renderComposer();
}

/** Shows the signed-in user in the header (an empty `user` hides it). @param {string} user */
function showUser(user) {
  const element = /** @type {HTMLElement} */ (document.getElementById('user'));
  element.textContent = user;
  element.title = user ? `signed in as ${user} (auth: ${authMode ?? 'unknown'})` : '';
  element.hidden = !user;
}

/**
 * Asks /api/me until it answers 200, asking for a token while it answers
 * 401; a refused token is forgotten and the form shows why.
 * @param {string} [problem] shown with the form when /api/me gives no reason
 */
async function signIn(problem = '') {
  for (;;) {
    const me = await fetchMe();
    if (me.kind === 'ok') {
      authMode = me.auth;
      hideTokenForm();
      showUser(me.user);
      return;
    }
    if (me.kind === 'unavailable') {
      hideTokenForm();
      return;
    }
    setToken(null);
    showUser('');
    const token = await askForToken(me.message || problem);
    problem = '';
    setToken(token);
  }
}

/**
 * A chat request was answered 401 (the token expired or was revoked): forget
 * the token and ask again; the chat's error is cleared once signed in.
 */
function tokenRefused() {
  if (pendingSignIn) return;
  setToken(null);
  pendingSignIn = signIn('The gateway refused the token (it may have expired): enter it again.')
    .then(() => currentChat?.clearError())
    .catch(error => console.error('sign-in failed', error))
    .finally(() => {
      pendingSignIn = undefined;
    });
}

/**
 * After a failed chat request with auth on: a WebSocket refused at the
 * handshake (401) shows only as a network error, so ask /api/me whether the
 * token still holds.
 */
async function checkToken() {
  if (authMode == null || authMode === 'none' || pendingSignIn) return;
  const me = await fetchMe();
  if (me.kind === 'unauthorized') tokenRefused();
}

/**
 * `fetch` for the SSE transport: a 401 answer means the token no longer
 * holds (the transport then fails the request with the body as its message).
 * @type {typeof fetch}
 */
async function chatFetch(input, init) {
  const response = await fetch(input, init);
  if (response.status === 401) tokenRefused();
  return response;
}

/** @param {Error} error */
function handleChatError(error) {
  if (authNeeded || pendingSignIn) {
    console.warn('chat request refused: sign in again', error.message);
    return;
  }
  console.error('chat error:', error);
  checkToken().catch(() => undefined);
}

// ---------------------------------------------------------------------------
// Chat and transport lifecycle.

/** @type {'sse' | 'ws'} */
let transportKind = storageGet(localStorage, STORAGE.transport) === 'ws' ? 'ws' : 'sse';
/** @type {WebSocketChatTransport | undefined} */
let wsTransport;
/** @type {PageChat | undefined} */
let currentChat;
/** Settles when the last Stop has reached the gateway (bounded). */
let pendingStop = Promise.resolve();

/** @param {'sse' | 'ws'} kind */
function getTransport(kind) {
  if (kind === 'ws') {
    wsTransport ??= new WebSocketChatTransport({ params: wsParams });
    return wsTransport;
  }
  return new DefaultChatTransport({ api: '/api/chat', headers: authHeaders, fetch: chatFetch });
}

/**
 * @param {string} chatId
 * @param {UIMessage[]} messages
 */
function createChat(chatId, messages) {
  /** @type {PageChat} */
  let chat;
  chat = new PageChat({
    id: chatId,
    messages,
    transport: getTransport(transportKind),
    sendAutomaticallyWhen,
    onToolCall: options => handleToolCall(chat, /** @type {any} */ (options)),
    onError: handleChatError,
  });
  chat.observable.subscribe(what => {
    if (chat !== currentChat) return;
    if (what === 'status') {
      const status = chat.status;
      if (status === 'ready' || status === 'error' || status === 'submitted') {
        saveMessages(chat.id, chat.messages);
      }
    }
    scheduleRender();
  });
  currentChat = chat;
  // @ts-ignore -- for the browser tests
  window.__chat = chat;
  storageSet(sessionStorage, STORAGE.chatId, chat.id);
  scheduleRender();
  return chat;
}

/**
 * resume: true -- pick up a response still running for this chat (a full
 * replay), then run approved browser tools a reload left without output.
 * @param {PageChat} chat
 */
function resume(chat) {
  chat
    .resumeStream()
    .catch(error => console.error('resume failed', error))
    .then(() => {
      if (chat === currentChat) runPendingBrowserTools(chat);
    });
}

/** @param {PageChat} chat */
async function retire(chat) {
  if (chat.status === 'submitted' || chat.status === 'streaming') {
    await stop(chat);
  }
  saveMessages(chat.id, chat.messages);
}

/**
 * Stop: abort the request (SSE: drop the connection; WebSocket: `abort`
 * frame). For SSE also ask the gateway to stop the run, since in resume mode
 * a disconnect is not a stop; the next send waits for that to arrive.
 * @param {PageChat} chat
 */
async function stop(chat) {
  if (transportKind === 'sse') {
    const url = `/api/chat/${encodeURIComponent(chat.id)}/stop`;
    const request = fetch(url, {
      method: 'POST',
      keepalive: true,
      headers: { 'Content-Type': 'application/json', ...authHeaders() },
      body: '{}',
    }).catch(() => undefined);
    pendingStop = Promise.race([request, new Promise(resolve => setTimeout(resolve, 2000))]);
  }
  await chat.stop();
}

/** @param {string} text */
async function send(text) {
  const chat = currentChat;
  if (chat == null) return;
  const trimmed = text.trim();
  if (!trimmed) return;
  if (chat.status === 'submitted' || chat.status === 'streaming') return;
  if (authNeeded) return;
  await pendingStop;
  await chat.sendMessage({ text: trimmed });
}

async function switchTransport(/** @type {'sse' | 'ws'} */ kind) {
  if (kind === transportKind) return;
  const old = currentChat;
  if (old) await retire(old);
  transportKind = kind;
  storageSet(localStorage, STORAGE.transport, kind);
  if (kind !== 'ws' && wsTransport) {
    wsTransport.close();
    wsTransport = undefined;
  }
  // Before sign-in there is no chat yet: init creates it with this transport.
  if (old) createChat(old.id, old.messages);
}

async function newChat() {
  const old = currentChat;
  if (old == null) return; // before sign-in: init starts the chat
  await retire(old);
  storageSet(sessionStorage, STORAGE.messages(old.id), null);
  for (const entry of renderedMessages.values()) entry.element.remove();
  renderedMessages.clear();
  openDetails.clear();
  createChat(generateId(), []);
}

// ---------------------------------------------------------------------------
// Wiring.

/** The token form: a non-empty token answers the pending question. */
function wireTokenForm() {
  const form = /** @type {HTMLFormElement} */ (document.getElementById('auth-form'));
  const input = /** @type {HTMLInputElement} */ (document.getElementById('auth-token'));
  const button = /** @type {HTMLButtonElement} */ (document.getElementById('auth-submit'));
  form.addEventListener('submit', event => {
    event.preventDefault();
    const token = input.value.trim();
    const waiter = tokenWaiter;
    if (!token || waiter == null) return;
    tokenWaiter = undefined;
    input.value = '';
    button.disabled = true;
    waiter(token);
  });
}

async function init() {
  const input = /** @type {HTMLTextAreaElement} */ (document.getElementById('input'));
  const form = /** @type {HTMLFormElement} */ (document.getElementById('form'));
  const transportSelect = /** @type {HTMLSelectElement} */ (document.getElementById('transport'));
  const quick = /** @type {HTMLElement} */ (document.getElementById('quick'));

  const submit = () => {
    const text = input.value;
    if (!text.trim()) return;
    const chat = currentChat;
    if (chat && (chat.status === 'submitted' || chat.status === 'streaming')) return;
    if (authNeeded) return;
    input.value = '';
    autosize();
    send(text).catch(error => console.error('send failed', error));
  };

  const autosize = () => {
    input.style.height = 'auto';
    input.style.height = `${Math.min(input.scrollHeight, 200)}px`;
  };

  form.addEventListener('submit', event => {
    event.preventDefault();
    submit();
  });
  input.addEventListener('keydown', event => {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      submit();
    }
  });
  input.addEventListener('input', autosize);

  document.getElementById('stop')?.addEventListener('click', () => {
    if (currentChat) stop(currentChat).catch(error => console.error('stop failed', error));
  });
  document.getElementById('new-chat')?.addEventListener('click', () => {
    newChat().catch(error => console.error('new chat failed', error));
  });

  transportSelect.value = transportKind;
  transportSelect.addEventListener('change', () => {
    const kind = transportSelect.value === 'ws' ? 'ws' : 'sse';
    switchTransport(kind).catch(error => console.error('switch failed', error));
  });

  for (const command of QUICK_COMMANDS) {
    const button = h('button', {
      type: 'button',
      'data-testid': 'quick',
      'data-command': command,
      title: command,
      text: command,
    });
    button.addEventListener('click', () => {
      send(command).catch(error => console.error('send failed', error));
    });
    quick.append(button);
  }

  window.addEventListener('pagehide', () => {
    const chat = currentChat;
    if (chat && chat.status !== 'submitted' && chat.status !== 'streaming') {
      saveMessages(chat.id, chat.messages);
    }
  });

  wireTokenForm();
  await signIn();

  const chatId = storageGet(sessionStorage, STORAGE.chatId) ?? generateId();
  const chat = createChat(chatId, loadMessages(chatId));
  resume(chat);
  input.focus();
  // @ts-ignore -- for the browser tests
  window.__ready = true;
}

/** Starts the page; a failure to start is logged, never left unhandled. */
function start() {
  init().catch(error => console.error('page start failed', error));
}

if (document.readyState === 'loading') {
  document.addEventListener('DOMContentLoaded', start, { once: true });
} else {
  start();
}

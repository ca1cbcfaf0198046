import { gatewayUrl } from './gateway.js';

/**
 * The user's chats on the gateway (`/api/chats`): listed, loaded, renamed, deleted. Every call
 * carries the page's credential (`token`, '' without auth), as the chat requests do.
 *
 * A failed call throws a `ChatsError` with the HTTP status and the gateway's error code
 * (`not_found` for an unknown chat or another user's). `status: 0`: the gateway was not reached.
 */
export class ChatsError extends Error {
  constructor(message, { status = 0, code = '' } = {}) {
    super(message);
    this.name = 'ChatsError';
    this.status = status;
    this.code = code;
  }

  /** The gateway knows no such chat (deleted, never had a turn, or another user's). */
  get notFound() {
    return this.status === 404 && this.code === 'not_found';
  }

  /** The gateway has no chats API at all (an older one): 404 or 405 without its JSON error. */
  get unsupported() {
    return (this.status === 404 || this.status === 405) && this.code !== 'not_found';
  }
}

async function call(path, { token, method = 'GET', body } = {}) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let response;
  try {
    response = await fetch(gatewayUrl(path), {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
    });
  } catch (error) {
    throw new ChatsError(`The gateway could not be reached (${error.message}).`);
  }
  if (response.status === 204) return null;
  const payload = await response.json().catch(() => null);
  if (!response.ok) {
    const error = payload?.error;
    throw new ChatsError(error?.message || `${method} ${path} answered ${response.status}`, {
      status: response.status,
      code: typeof error?.code === 'string' ? error.code : '',
    });
  }
  return payload;
}

const chatPath = (id, app) => `/api/chats/${encodeURIComponent(id)}${app ? `?app=${encodeURIComponent(app)}` : ''}`;

/** A page of the user's chats, most recently updated first: `{chats, nextCursor?}`. */
export function listChats({ token, app, cursor, limit = 50 }) {
  const query = new URLSearchParams({ limit: String(limit) });
  if (app) query.set('app', app);
  if (cursor) query.set('cursor', cursor);
  return call(`/api/chats?${query}`, { token });
}

/** A chat with its messages as the client held them: `{id, app, title, messages}`. */
export function loadChat({ token, id, app }) {
  return call(chatPath(id, app), { token });
}

/** Renames a chat; returns its summary. */
export function renameChat({ token, id, app, title }) {
  return call(chatPath(id, app), { token, method: 'PATCH', body: { title } });
}

/** Deletes a chat (the gateway stops a running answer first). */
export function deleteChat({ token, id, app }) {
  return call(chatPath(id, app), { token, method: 'DELETE' });
}

import { DefaultChatTransport, WebSocketChatTransport } from 'ai';
import { gatewaySocketUrl, gatewayUrl } from './gateway.js';
import { lastMessageFrame, lastMessageRequest } from './requests.js';

/** Asks the gateway for `ai` 7's chunk set (e.g. `finishReason: "interrupted"` after "deny and stop"). */
const AI_SDK_7 = { 'x-ai-sdk-major': '7' };

/**
 * The stock transports of `ai` 7, pointed at the gateway.
 * - `getToken()` returns the access token ('' without auth); it is read on every request (SSE) or
 *   connection (WebSocket), so a new token is used without a new transport.
 * - `getApp()` names the app that answers (undefined: the gateway's default); it goes in every
 *   request's body as `app`.
 * - `onUnauthorized()` runs when an HTTP request is answered 401.
 * - `lastMessageOnly()`: the gateway keeps the chat's history (it has `/api/chats`), so each
 *   request carries only the last message (src/requests.js); false: the whole history, for an
 *   older gateway. Read on every request.
 */
export function createTransport(kind, { getToken, getApp = () => undefined, onUnauthorized, lastMessageOnly = () => true }) {
  const body = () => (getApp() ? { app: getApp() } : {});
  if (kind === 'ws') {
    return new WebSocketChatTransport({
      url: gatewaySocketUrl('/api/chat/ws').href,
      // Browsers cannot set handshake headers: the token goes in the URL.
      params: () => (getToken() ? { access_token: getToken() } : {}),
      headers: AI_SDK_7,
      body,
      prepareSendMessagesRequest: options => (lastMessageOnly() ? lastMessageFrame(options) : undefined),
    });
  }
  return new DefaultChatTransport({
    api: gatewayUrl('/api/chat'),
    headers: () => ({ ...AI_SDK_7, ...authorization(getToken()) }),
    body,
    prepareSendMessagesRequest: options => (lastMessageOnly() ? lastMessageRequest(options) : undefined),
    fetch: async (input, init) => {
      const response = await fetch(input, init);
      if (response.status === 401) onUnauthorized();
      return response;
    },
  });
}

function authorization(token) {
  return token ? { Authorization: `Bearer ${token}` } : {};
}

/**
 * Stops the chat's run on the gateway. Needed with SSE when the gateway keeps runs going after a
 * disconnect (`--detach-on-disconnect`, for resume): then aborting the fetch is not a stop. The
 * WebSocket transport's `stop()` sends an `abort` frame, which is.
 */
export async function stopRun(chatId, token) {
  await fetch(gatewayUrl(`/api/chat/${encodeURIComponent(chatId)}/stop`), {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...authorization(token) },
    body: '{}',
  });
}

/** The live extension's socket URL (same endpoint as the chat WebSocket). */
export function liveSocketUrl(token) {
  const url = gatewaySocketUrl('/api/chat/ws');
  if (token) url.searchParams.set('access_token', token);
  return url.href;
}

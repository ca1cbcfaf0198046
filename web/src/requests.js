/**
 * Last-message requests: the gateway keeps each chat's history (`/api/chats`), so a request
 * carries only the message that is new — the user's, or the assistant's with the answers to its
 * approvals and tools (a continuation) — as the AI SDK's message persistence guide does. Pure
 * functions, shared by the transports (src/transport.js) and the unit tests.
 */

/** `DefaultChatTransport`'s `prepareSendMessagesRequest`: `{id, message, trigger, messageId, ...body}`. */
export function lastMessageRequest({ id, messages, body, trigger, messageId }) {
  return { body: { ...body, id, message: messages.at(-1), trigger, messageId } };
}

/** `WebSocketChatTransport`'s `prepareSendMessagesRequest`: a `send` frame with one message. */
export function lastMessageFrame({ messages, body }) {
  return { messages: messages.slice(-1), body: { ...body, message: messages.at(-1) } };
}

/** Tool states: waiting for the user (or the page), and answered. */
const WAITING = new Set(['approval-requested', 'input-available']);
const ANSWERED = new Set(['approval-responded', 'output-available', 'output-error', 'output-denied']);

/** The tab answered a call of this assistant message that the gateway's copy still waits on. */
function answeredHere(server, pending) {
  if (server?.role !== 'assistant' || pending?.id !== server.id || !Array.isArray(pending.parts)) return false;
  return server.parts.some(
    part =>
      part.toolCallId &&
      WAITING.has(part.state) &&
      pending.parts.some(mine => mine.toolCallId === part.toolCallId && ANSWERED.has(mine.state)),
  );
}

/**
 * The messages to show when a chat is opened: the gateway's, then what this tab sent that the
 * gateway has not recorded yet. The gateway records a turn when it ends, so a reload while an
 * answer runs finds the question missing there (or, for a continuation, the answer to the
 * approval); the tab kept it (`pending`, its messages as the page went away). `pending` counts
 * only if it continues the gateway's history (the same ids in the same order): else another
 * device went on with the chat, and the gateway's is the one.
 */
export function withPendingTail(server, pending) {
  if (!Array.isArray(pending) || pending.length < server.length) return server;
  if (!server.every((message, index) => pending[index]?.id === message.id)) return server;
  if (pending.length > server.length) return [...server, ...pending.slice(server.length)];
  const last = server.length - 1;
  return answeredHere(server[last], pending[last]) ? [...server.slice(0, last), pending[last]] : server;
}

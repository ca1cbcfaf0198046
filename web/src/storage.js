/**
 * What the page keeps in sessionStorage (this tab only). The gateway keeps the chats
 * (`/api/chats`); the page keeps:
 * - a chat's messages while an answer runs, saved as the page goes away, so that a reload shows
 *   the question whose answer it resumes (the gateway records a turn when it ends);
 * - the ids of chats started here that have no turn yet (a reload of one does not ask the gateway);
 * - with a gateway that has no chats API (an older one), each chat's whole history, as before.
 */
const historyKey = chatId => `adk-gateway.messages.${chatId}`;
const pendingKey = chatId => `adk-gateway.pending.${chatId}`;
const NEW_CHATS = 'adk-gateway.new-chats';

function read(key, fallback) {
  try {
    const value = JSON.parse(sessionStorage.getItem(key) ?? 'null');
    return value ?? fallback;
  } catch {
    return fallback;
  }
}

function write(key, value) {
  try {
    if (value == null) sessionStorage.removeItem(key);
    else sessionStorage.setItem(key, JSON.stringify(value));
  } catch {
    // Over quota or no storage: the chat still works, it just is not kept.
  }
}

const messagesOf = value => (Array.isArray(value) ? value : []);

/** A chat's whole history (only with a gateway that does not keep chats). */
export const loadMessages = chatId => messagesOf(read(historyKey(chatId), []));
export const saveMessages = (chatId, messages) => write(historyKey(chatId), messages);

/** A chat's messages as the page went away during an answer (see `withPendingTail`). */
export const loadPending = chatId => messagesOf(read(pendingKey(chatId), []));
export const savePending = (chatId, messages) => write(pendingKey(chatId), messages);
export const clearPending = chatId => write(pendingKey(chatId), null);

/** Chats started in this tab that have no turn yet. */
export const isNewChat = chatId => messagesOf(read(NEW_CHATS, [])).includes(chatId);

export function rememberNewChat(chatId) {
  const ids = messagesOf(read(NEW_CHATS, [])).filter(id => id !== chatId);
  write(NEW_CHATS, [...ids.slice(-19), chatId]);
}

export function forgetNewChat(chatId) {
  const ids = messagesOf(read(NEW_CHATS, []));
  if (ids.includes(chatId)) write(NEW_CHATS, ids.filter(id => id !== chatId));
}

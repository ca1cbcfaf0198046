/** A chat's messages in sessionStorage, so a reload shows them (and resumes an answer still running). */
const key = chatId => `adk-gateway.messages.${chatId}`;

export function loadMessages(chatId) {
  try {
    const messages = JSON.parse(sessionStorage.getItem(key(chatId)) ?? '[]');
    return Array.isArray(messages) ? messages : [];
  } catch {
    return [];
  }
}

export function saveMessages(chatId, messages) {
  try {
    sessionStorage.setItem(key(chatId), JSON.stringify(messages));
  } catch {
    // Over quota or no storage: the chat still works, it just is not kept.
  }
}

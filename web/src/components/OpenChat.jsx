import { useEffect, useState } from 'react';
import { loadChat } from '../chats.js';
import { withPendingTail } from '../requests.js';
import { loadMessages, loadPending } from '../storage.js';
import { Chat } from './Chat.jsx';

/**
 * Opens a chat: a new one (`fresh`) at once; any other from the gateway (GET /api/chats/{id}),
 * with the messages this tab sent that the gateway has not recorded yet (a reload during an
 * answer, see `withPendingTail`), then `Chat` continues it. An unknown chat (deleted, or another
 * user's) goes to `onNotFound`; a gateway without the chats API (an older one) falls back to the
 * tab's own copy (`onUnsupported`).
 */
export function OpenChat({ chatId, fresh, app, token, keepsChats, onNotFound, onUnsupported, onLoaded, ...chatProps }) {
  const [opened, setOpened] = useState(() =>
    fresh ? { phase: 'ready', messages: keepsChats === false ? loadMessages(chatId) : [] } : { phase: 'loading' },
  );
  const [attempt, setAttempt] = useState(0);

  useEffect(() => {
    if (opened.phase !== 'loading') return undefined;
    let cancelled = false;
    loadChat({ token, id: chatId, app })
      .then(chat => {
        if (cancelled) return;
        const messages = Array.isArray(chat?.messages) ? chat.messages : [];
        setOpened({ phase: 'ready', messages: withPendingTail(messages, loadPending(chatId)) });
        onLoaded?.(chat);
      })
      .catch(error => {
        if (cancelled) return;
        if (error.notFound) onNotFound(chatId);
        else if (error.unsupported) {
          onUnsupported?.();
          setOpened({ phase: 'ready', messages: loadMessages(chatId) });
        } else if (error.status === 401) {
          chatProps.onUnauthorized?.();
          setOpened({ phase: 'unauthorized' });
        } else setOpened({ phase: 'error', message: error.message });
      });
    return () => {
      cancelled = true;
    };
    // Loaded once per mount (a new chat or transport is a new OpenChat), again on "Try again" and
    // after a new sign-in; not when the token or app changes under an open chat.
  }, [attempt, opened.phase]);

  // Signed in again after a refused token: load it now.
  useEffect(() => {
    if (opened.phase === 'unauthorized' && token) setOpened({ phase: 'loading' });
  }, [opened.phase, token]);

  if (opened.phase === 'ready') {
    return (
      <Chat
        chatId={chatId}
        initialMessages={opened.messages}
        app={app}
        token={token}
        keepsChats={keepsChats}
        {...chatProps}
      />
    );
  }
  return (
    <main className="chat">
      {opened.phase === 'error' ? (
        <div className="error" role="alert" data-testid="load-error">
          <p>The chat could not be loaded: {opened.message}</p>
          <button
            type="button"
            onClick={() => {
              setOpened({ phase: 'loading' });
              setAttempt(value => value + 1);
            }}
          >
            Try again
          </button>
        </div>
      ) : (
        <p className="muted loading" role="status" data-testid="chat-loading">
          {opened.phase === 'unauthorized' ? 'Sign in to open this chat.' : 'Loading the chat…'}
        </p>
      )}
    </main>
  );
}

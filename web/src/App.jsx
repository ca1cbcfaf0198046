import { generateId } from 'ai';
import { useEffect, useState } from 'react';
import { Chat } from './components/Chat.jsx';
import { SignIn } from './components/SignIn.jsx';
import { useAuth } from './useAuth.js';

/** The transport and the chat live in the URL (`?transport=ws&chat=…`): a reload resumes that chat. */
function readUrl() {
  const params = new URLSearchParams(window.location.search);
  return {
    transport: params.get('transport') === 'ws' ? 'ws' : 'sse',
    chatId: params.get('chat') || generateId(),
  };
}

function writeUrl({ transport, chatId }) {
  const url = new URL(window.location.href);
  url.searchParams.set('transport', transport);
  url.searchParams.set('chat', chatId);
  window.history.replaceState(null, '', url);
}

export function App() {
  const [view, setView] = useState(readUrl);
  const auth = useAuth();

  useEffect(() => writeUrl(view), [view]);

  return (
    <div className="app">
      <header className="topbar">
        <h1>ADK Gateway</h1>
        <label className="field">
          <span>Transport</span>
          <select
            data-testid="transport"
            value={view.transport}
            onChange={event => setView(current => ({ ...current, transport: event.target.value }))}
          >
            <option value="sse">SSE</option>
            <option value="ws">WebSocket</option>
          </select>
        </label>
        {auth.user && (
          <span className="user" data-testid="user" title={`signed in (auth: ${auth.mode})`}>
            {auth.user}
          </span>
        )}
        <button
          type="button"
          data-testid="new-chat"
          onClick={() => setView(current => ({ ...current, chatId: generateId() }))}
        >
          New chat
        </button>
      </header>

      {auth.phase === 'needs-token' && (
        <SignIn problem={auth.problem} busy={auth.busy} onSubmit={auth.signIn} />
      )}

      {auth.started ? (
        // A new transport or chat is a new Chat (remounted); the old one stops its request.
        <Chat
          key={`${view.transport}:${view.chatId}`}
          chatId={view.chatId}
          transportKind={view.transport}
          token={auth.token}
          locked={auth.phase !== 'signed-in'}
          onUnauthorized={auth.tokenRefused}
          onNetworkError={auth.recheck}
        />
      ) : (
        auth.phase === 'checking' && <p className="muted loading">Connecting…</p>
      )}
    </div>
  );
}

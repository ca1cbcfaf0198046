import { generateId } from 'ai';
import { useEffect, useState } from 'react';
import { Chat } from './components/Chat.jsx';
import { SignIn } from './components/SignIn.jsx';
import { appToUse, useApps } from './useApps.js';
import { useAuth } from './useAuth.js';

/**
 * The transport, the chat and the app (when the gateway serves several) live in the URL
 * (`?transport=ws&chat=…&app=…`): a reload resumes that chat.
 */
function readUrl() {
  const params = new URLSearchParams(window.location.search);
  return {
    transport: params.get('transport') === 'ws' ? 'ws' : 'sse',
    chatId: params.get('chat') || generateId(),
    app: params.get('app') || '',
  };
}

function writeUrl({ transport, chatId }, app) {
  const url = new URL(window.location.href);
  url.searchParams.set('transport', transport);
  url.searchParams.set('chat', chatId);
  if (app) url.searchParams.set('app', app);
  else url.searchParams.delete('app');
  window.history.replaceState(null, '', url);
}

/** Which app the chat talks to, shown only when the gateway serves more than one. */
function AppPicker({ names, value, onChange }) {
  return (
    <div className="field">
      <label htmlFor="app-picker">App</label>
      <select id="app-picker" data-testid="app" value={value} onChange={event => onChange(event.target.value)}>
        {names.map(name => (
          <option key={name} value={name}>
            {name}
          </option>
        ))}
      </select>
    </div>
  );
}

export function App() {
  const [view, setView] = useState(readUrl);
  const auth = useAuth();
  const apps = useApps(auth.phase === 'signed-in', auth.token);
  const app = appToUse(apps, view.app);

  useEffect(() => writeUrl(view, app), [view, app]);

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
        {app && apps && (
          // Another app is another conversation: a new chat.
          <AppPicker
            names={apps.names}
            value={app}
            onChange={value => setView(current => ({ ...current, app: value, chatId: generateId() }))}
          />
        )}
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
          app={app}
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

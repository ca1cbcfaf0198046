import { generateId } from 'ai';
import { useCallback, useEffect, useRef, useState } from 'react';
import { OpenChat } from './components/OpenChat.jsx';
import { Sidebar } from './components/Sidebar.jsx';
import { SignIn } from './components/SignIn.jsx';
import { forgetNewChat, isNewChat, rememberNewChat } from './storage.js';
import { appInfoOf, appToUse, useApps } from './useApps.js';
import { useAuth } from './useAuth.js';
import { useChats } from './useChats.js';

/** A chat started here: nothing to load until its first turn. */
function newChatId() {
  const id = generateId();
  rememberNewChat(id);
  return id;
}

/**
 * The transport, the chat and the app (when the gateway serves several) live in the URL
 * (`?transport=ws&chat=…&app=…`): a reload, or another browser of the same user, opens that
 * chat from the gateway. `fresh`: a chat started in this tab that has no turn yet.
 */
function readUrl() {
  const params = new URLSearchParams(window.location.search);
  const chatId = params.get('chat');
  return {
    transport: params.get('transport') === 'ws' ? 'ws' : 'sse',
    chatId: chatId || newChatId(),
    fresh: !chatId || isNewChat(chatId),
    app: params.get('app') || '',
  };
}

function urlOf({ transport, chatId }, app) {
  const url = new URL(window.location.href);
  url.searchParams.set('transport', transport);
  url.searchParams.set('chat', chatId);
  if (app) url.searchParams.set('app', app);
  else url.searchParams.delete('app');
  return url;
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
  const [notice, setNotice] = useState('');
  const [sidebarOpen, setSidebarOpen] = useState(false);
  const toggle = useRef(null);
  const auth = useAuth();
  const signedIn = auth.phase === 'signed-in';
  const apps = useApps(signedIn, auth.token);
  const app = appToUse(apps, view.app);
  const appInfo = appInfoOf(apps, app); // its model and tools: the composer's suggestions
  const chats = useChats({ ready: signedIn, token: auth.token, app, onUnauthorized: auth.tokenRefused });
  const keepsChats = chats.supported !== false;

  useEffect(() => window.history.replaceState(null, '', urlOf(view, app)), [view, app]);

  const open = useCallback((chatId, { fresh = false, app: chatApp } = {}) => {
    setView(current => ({ ...current, chatId, fresh, ...(chatApp !== undefined ? { app: chatApp } : {}) }));
    setNotice('');
  }, []);
  const newChat = useCallback(() => open(newChatId(), { fresh: true }), [open]);

  const closeSidebar = useCallback(() => {
    setSidebarOpen(false);
    if (toggle.current?.offsetParent) toggle.current.focus(); // a phone: back to the button that opened it
  }, []);

  // The chat's first request: it is on the gateway now (a reload loads it).
  const onStarted = useCallback(() => {
    forgetNewChat(view.chatId);
    setNotice('');
    setView(current => (current.chatId === view.chatId && current.fresh ? { ...current, fresh: false } : current));
  }, [view.chatId]);

  const onNotFound = useCallback(
    chatId => {
      forgetNewChat(chatId);
      newChat();
      setNotice(`The chat “${chatId}” was not found: it may have been deleted. This is a new chat.`);
      chats.refresh();
    },
    [chats, newChat],
  );

  // Opened from a link without its app (a gateway with several): the picker follows the chat.
  const onLoaded = useCallback(
    loaded => {
      if (apps && apps.names.length > 1 && loaded?.app && loaded.app !== app) {
        setView(current => ({ ...current, app: loaded.app }));
      }
    },
    [apps, app],
  );

  const onDelete = useCallback(
    async chat => {
      await chats.remove(chat);
      if (chat.id === view.chatId) newChat();
      chats.refresh();
    },
    [chats, newChat, view.chatId],
  );

  const onRename = useCallback(
    async (chat, title) => {
      const summary = await chats.rename(chat, title);
      chats.refresh(); // a rename counts as an update: the order may change
      return summary;
    },
    [chats],
  );

  const showSidebar = auth.started && keepsChats;
  return (
    <div className="app">
      <header className="topbar">
        {showSidebar && (
          <button
            ref={toggle}
            type="button"
            className="sidebar-toggle"
            data-testid="chats-toggle"
            aria-expanded={sidebarOpen}
            aria-controls="chat-sidebar"
            onClick={() => setSidebarOpen(value => !value)}
          >
            Chats
          </button>
        )}
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
            onChange={value => {
              setView(current => ({ ...current, app: value }));
              newChat();
            }}
          />
        )}
        {auth.user && (
          <span className="user" data-testid="user" title={`signed in (auth: ${auth.mode})`}>
            {auth.user}
          </span>
        )}
        <button type="button" data-testid="new-chat" onClick={newChat}>
          New chat
        </button>
      </header>

      {auth.phase === 'needs-token' && (
        <SignIn problem={auth.problem} busy={auth.busy} onSubmit={auth.signIn} />
      )}

      {notice && (
        <div className="notice" role="status" data-testid="chat-notice">
          <p>{notice}</p>
          <button type="button" onClick={() => setNotice('')}>
            Close
          </button>
        </div>
      )}

      <div className="workspace">
        {showSidebar && (
          <Sidebar
            chats={chats}
            currentId={view.chatId}
            open={sidebarOpen}
            onClose={closeSidebar}
            hrefOf={chat => urlOf({ ...view, chatId: chat.id }, apps && apps.names.length > 1 ? chat.app : app).href}
            onSelect={chat => {
              if (chat.id !== view.chatId) open(chat.id, apps && apps.names.length > 1 ? { app: chat.app } : {});
              closeSidebar();
            }}
            onRename={onRename}
            onDelete={onDelete}
            onLoadMore={chats.loadMore}
          />
        )}
        {auth.started ? (
          // A new transport or chat is a new chat view (remounted); the old one stops its request.
          <OpenChat
            key={`${view.transport}:${view.chatId}`}
            chatId={view.chatId}
            fresh={view.fresh}
            transportKind={view.transport}
            app={app}
            appInfo={appInfo}
            token={auth.token}
            locked={auth.phase !== 'signed-in'}
            keepsChats={keepsChats}
            onUnauthorized={auth.tokenRefused}
            onNetworkError={auth.recheck}
            onStarted={onStarted}
            onTurnEnd={chats.refresh}
            onNotFound={onNotFound}
            onUnsupported={chats.unsupported}
            onLoaded={onLoaded}
          />
        ) : (
          auth.phase === 'checking' && <p className="muted loading">Connecting…</p>
        )}
      </div>
    </div>
  );
}

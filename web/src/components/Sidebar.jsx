import { useEffect, useRef, useState } from 'react';

const titleOf = chat => chat.title?.trim() || 'Untitled chat';

const WHEN = new Intl.DateTimeFormat(undefined, { dateStyle: 'short', timeStyle: 'short' });

function when(ms) {
  const date = new Date(ms);
  return Number.isNaN(date.getTime()) ? '' : WHEN.format(date);
}

/**
 * One chat of the list: a link that opens it (a real link: it can open in another tab), then
 * Rename (an inline form: Enter saves, Escape cancels) and Delete (asks first). The focus goes
 * back where it was when a form or question closes.
 */
function ChatItem({ chat, current, showApp, href, onSelect, onRename, onDelete }) {
  const [mode, setMode] = useState('view'); // 'view' | 'rename' | 'delete'
  const [draft, setDraft] = useState('');
  const [busy, setBusy] = useState(false);
  const [problem, setProblem] = useState('');
  const focusNext = useRef(null); // which button gets the focus when the item shows its buttons again
  const renameButton = useRef(null);
  const deleteButton = useRef(null);
  const title = titleOf(chat);

  useEffect(() => {
    if (mode !== 'view' || focusNext.current == null) return;
    (focusNext.current === 'delete' ? deleteButton : renameButton).current?.focus();
    focusNext.current = null;
  }, [mode]);

  const close = button => {
    focusNext.current = button;
    setProblem('');
    setMode('view');
  };

  const save = async event => {
    event.preventDefault();
    const value = draft.trim();
    if (!value) return setProblem('A title needs at least one character.');
    if (value === chat.title) return close('rename');
    setBusy(true);
    try {
      await onRename(chat, value);
      close('rename');
    } catch (error) {
      setProblem(`Not renamed: ${error.message}`);
    } finally {
      setBusy(false);
    }
  };

  const remove = async () => {
    setBusy(true);
    try {
      await onDelete(chat); // the item goes from the list
    } catch (error) {
      setBusy(false);
      setProblem(`Not deleted: ${error.message}`);
    }
  };

  const inputId = `rename-${chat.app}-${chat.id}`;
  return (
    <li
      className={`chat-item${current ? ' current' : ''}`}
      data-testid="chat-item"
      data-chat-id={chat.id}
      data-app={chat.app}
    >
      {mode === 'rename' && (
        <form className="chat-rename" onSubmit={save} data-testid="rename-form">
          <label htmlFor={inputId} className="visually-hidden">
            New title for “{title}”
          </label>
          <input
            id={inputId}
            data-testid="rename-input"
            value={draft}
            maxLength={200}
            autoFocus
            onFocus={event => event.currentTarget.select()}
            onChange={event => setDraft(event.target.value)}
            onKeyDown={event => {
              if (event.key === 'Escape') {
                event.stopPropagation();
                close('rename');
              }
            }}
          />
          <div className="row">
            <button type="submit" data-testid="rename-save" disabled={busy}>
              Save
            </button>
            <button type="button" data-testid="rename-cancel" onClick={() => close('rename')}>
              Cancel
            </button>
          </div>
        </form>
      )}
      {mode === 'delete' && (
        <div className="chat-confirm" role="group" aria-label={`Delete “${title}”?`} data-testid="delete-confirmation">
          <p>
            Delete “{title}”? It is gone for good, on every device.
          </p>
          <div className="row">
            <button type="button" className="danger" data-testid="delete-confirm" disabled={busy} onClick={remove}>
              Delete
            </button>
            <button
              type="button"
              data-testid="delete-cancel"
              autoFocus
              onClick={() => close('delete')}
              onKeyDown={event => {
                if (event.key === 'Escape') {
                  event.stopPropagation();
                  close('delete');
                }
              }}
            >
              Cancel
            </button>
          </div>
        </div>
      )}
      {mode === 'view' && (
        <>
          <a
            href={href}
            className="chat-link"
            data-testid="chat-link"
            aria-current={current ? 'page' : undefined}
            onClick={event => {
              if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
              event.preventDefault();
              onSelect(chat);
            }}
          >
            <span className="chat-title" data-testid="chat-title">
              {title}
            </span>
            <span className="chat-meta">
              {showApp && <span data-testid="chat-app">{chat.app} · </span>}
              <time dateTime={new Date(chat.updatedAt).toISOString()}>{when(chat.updatedAt)}</time>
            </span>
          </a>
          <div className="chat-actions">
            <button
              ref={renameButton}
              type="button"
              data-testid="rename"
              aria-label={`Rename “${title}”`}
              title="Rename"
              onClick={() => {
                setDraft(chat.title ?? '');
                setMode('rename');
              }}
            >
              <span aria-hidden="true">✎</span>
            </button>
            <button
              ref={deleteButton}
              type="button"
              data-testid="delete"
              aria-label={`Delete “${title}”`}
              title="Delete"
              onClick={() => setMode('delete')}
            >
              <span aria-hidden="true">✕</span>
            </button>
          </div>
        </>
      )}
      {problem && (
        <p className="problem" role="alert">
          {problem}
        </p>
      )}
    </li>
  );
}

/**
 * The user's chats (newest first), as a navigation landmark with a list. On a phone it is
 * hidden behind the top bar's "Chats" button (`open`); Escape closes it there.
 */
export function Sidebar({ chats, currentId, open, onClose, hrefOf, onSelect, onRename, onDelete, onLoadMore }) {
  const heading = useRef(null);
  const apps = new Set(chats.chats.map(chat => chat.app));
  const showApp = apps.size > 1;
  return (
    <nav
      id="chat-sidebar"
      className={`sidebar${open ? ' open' : ''}`}
      aria-labelledby="chat-sidebar-heading"
      data-testid="sidebar"
      onKeyDown={event => {
        if (event.key === 'Escape' && open) onClose();
      }}
    >
      <h2 id="chat-sidebar-heading" ref={heading} tabIndex={-1}>
        Your chats
      </h2>
      {chats.error && (
        <p className="problem" role="alert" data-testid="chats-error">
          Chats not loaded: {chats.error}
        </p>
      )}
      {chats.chats.length === 0 && !chats.loading && !chats.error && <p className="muted">No chats yet.</p>}
      <ul className="chat-list" data-testid="chat-list" aria-busy={chats.loading || undefined}>
        {chats.chats.map(chat => (
          <ChatItem
            key={`${chat.app}/${chat.id}`}
            chat={chat}
            current={chat.id === currentId}
            showApp={showApp}
            href={hrefOf(chat)}
            onSelect={onSelect}
            onRename={onRename}
            onDelete={async item => {
              await onDelete(item);
              heading.current?.focus(); // the item and its buttons are gone
            }}
          />
        ))}
      </ul>
      {chats.nextCursor && (
        <button type="button" className="more" data-testid="more-chats" disabled={chats.loading} onClick={onLoadMore}>
          More chats
        </button>
      )}
    </nav>
  );
}

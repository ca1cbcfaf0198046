import { useEffect, useState } from 'react';

/** A tool's badges: needs approval, runs in the browser, answers later. */
function Badges({ badges }) {
  return badges.map(badge => (
    <span key={badge.kind} className={`badge ${badge.kind}`} data-testid="suggestion-badge" title={badge.title}>
      {badge.label}
    </span>
  ));
}

/**
 * The suggestions (see suggestions.js): the app's tools, then the scripted model's commands. A
 * tool's suggestion sends its call, or writes it in the message box for its arguments (`fill`).
 */
function Suggestions({ suggestions, disabled, onPick }) {
  const { tools, commands, more } = suggestions;
  if (tools.length === 0 && commands.length === 0) return null;
  return (
    <div className="commands" data-testid="suggestions">
      {tools.length > 0 && (
        <div className="suggestion-group" role="group" aria-label="Try a tool">
          {tools.map(suggestion => (
            <button
              key={suggestion.key}
              type="button"
              className={`suggestion ${suggestion.action}`}
              data-testid="suggestion"
              data-tool-name={suggestion.toolName}
              data-action={suggestion.action}
              data-text={suggestion.text}
              title={suggestion.title}
              disabled={disabled}
              onClick={() => onPick(suggestion)}
            >
              <span className="suggestion-head">
                <span className="suggestion-name">
                  {suggestion.label}
                  {suggestion.action === 'fill' && '…'}
                </span>
                <Badges badges={suggestion.badges} />
              </span>
              {suggestion.detail && <span className="suggestion-detail">{suggestion.detail}</span>}
            </button>
          ))}
          {more.length > 0 && (
            <span className="muted more-tools" data-testid="more-tools" title={more.join(', ')}>
              +{more.length} more
            </span>
          )}
        </div>
      )}
      {commands.length > 0 && (
        <div className="suggestion-group" role="group" aria-label="Try a command">
          {commands.map(suggestion => (
            <button
              key={suggestion.key}
              type="button"
              className="command"
              data-testid="command"
              title={suggestion.title}
              disabled={disabled}
              onClick={() => onPick(suggestion)}
            >
              {suggestion.label}
            </button>
          ))}
        </div>
      )}
    </div>
  );
}

const NO_SUGGESTIONS = { tools: [], commands: [], more: [] };

/** The message box: Enter sends, Shift+Enter adds a line, Escape stops the answer. */
export function Composer({ ref, busy, locked, live, onSend, onStop, suggestions = NO_SUGGESTIONS }) {
  const [text, setText] = useState('');
  // A suggestion wrote a call to complete: the box gets the focus, with its first argument selected.
  const [selection, setSelection] = useState(null);
  useEffect(() => {
    const box = ref?.current;
    if (selection == null || box == null) return;
    box.focus();
    box.setSelectionRange(selection[0], selection[1]);
  }, [ref, selection]);
  const disabled = busy || locked;
  const send = value => {
    if (disabled || !value.trim()) return;
    onSend(value.trim());
    setText('');
  };
  const pick = suggestion => {
    if (suggestion.action !== 'fill') {
      send(suggestion.text);
      return;
    }
    setText(suggestion.text);
    const end = suggestion.text.length;
    setSelection(suggestion.selection ? [...suggestion.selection] : [end, end]);
  };
  return (
    <footer className="composer">
      <Suggestions suggestions={suggestions} disabled={disabled} onPick={pick} />
      <form
        className="row"
        onSubmit={event => {
          event.preventDefault();
          send(text);
        }}
      >
        <label htmlFor="message" className="visually-hidden">
          {live ? 'Message to the voice conversation' : 'Message'}
        </label>
        <textarea
          ref={ref}
          id="message"
          data-testid="input"
          rows={1}
          value={text}
          placeholder={live ? 'Type to the voice conversation…' : 'Message…'}
          aria-describedby="message-keys"
          onChange={event => setText(event.target.value)}
          onKeyDown={event => {
            if (event.key === 'Enter' && !event.shiftKey && !event.nativeEvent.isComposing) {
              event.preventDefault();
              send(text);
            } else if (event.key === 'Escape' && busy) {
              onStop();
            }
          }}
        />
        <span id="message-keys" className="visually-hidden">
          Enter sends, Shift+Enter adds a line, Escape stops the answer.
        </span>
        <button type="submit" data-testid="send" disabled={disabled || !text.trim()}>
          Send
        </button>
        <button type="button" data-testid="stop" disabled={!busy} onClick={onStop}>
          Stop
        </button>
      </form>
    </footer>
  );
}

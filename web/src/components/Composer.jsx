import { useState } from 'react';

/** Commands of the scripted model (the offline default) to try the gateway with. */
const COMMANDS = [
  '/echo hello',
  '/stream 20 50',
  '/think why',
  '/image',
  '/tool get_weather {"location":"Paris"}',
  '/tool process_payment {"amount": 5, "recipient": "bob"}',
  '/tool change_bgm {"track": 2}',
  '/tool get_location {}',
];

/** The message box: Enter sends, Shift+Enter adds a line, Escape stops the answer. */
export function Composer({ ref, busy, locked, live, onSend, onStop }) {
  const [text, setText] = useState('');
  const disabled = busy || locked;
  const send = value => {
    if (disabled || !value.trim()) return;
    onSend(value.trim());
    setText('');
  };
  return (
    <footer className="composer">
      <div className="commands" role="group" aria-label="Try a command">
        {COMMANDS.map(command => (
          <button key={command} type="button" disabled={disabled} onClick={() => send(command)}>
            {command}
          </button>
        ))}
      </div>
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

import { isToolUIPart } from 'ai';
import { memo } from 'react';
import { Markdown } from './Markdown.jsx';
import { ToolPart } from './ToolPart.jsx';

/**
 * One message and its parts. `onAnswer(approvalId, approved, reason)` answers approvals;
 * `answers` holds answers sent but not yet shown by the part (live sessions). Memoized: while an
 * answer streams, only its message renders again.
 */
export const Message = memo(function Message({ message, onAnswer, answers, live = false }) {
  const streaming = message.parts.some(part => part.state === 'streaming');
  const who = message.role === 'user' ? 'You' : live ? 'Assistant (voice)' : 'Assistant';
  let steps = 0;
  return (
    <article
      className={`message ${message.role}`}
      data-testid="message"
      data-role={message.role}
      data-live={live || undefined}
      aria-label={who}
      aria-busy={streaming || undefined}
    >
      <div className="role" aria-hidden="true">
        {who}
      </div>
      {message.parts.map((part, index) => {
        const key = `${message.id}-${index}`;
        if (part.type === 'step-start') return steps++ > 0 ? <hr key={key} /> : null;
        if (part.type === 'text') {
          return (
            <div key={key} className="text" data-testid="text-part" data-state={part.state}>
              {message.role === 'user' ? <p>{part.text}</p> : <Markdown text={part.text} />}
            </div>
          );
        }
        if (part.type === 'reasoning') {
          return (
            <details key={key} className="reasoning" data-testid="reasoning-part">
              <summary>{part.state === 'streaming' ? 'Thinking…' : 'Reasoning'}</summary>
              <Markdown text={part.text} />
            </details>
          );
        }
        if (part.type === 'file' && part.mediaType?.startsWith('image/')) {
          return (
            <img
              key={key}
              className="image"
              data-testid="image"
              src={part.url}
              alt={part.filename ?? 'image from the assistant'}
            />
          );
        }
        if (part.type === 'file') {
          return (
            <a key={key} href={part.url} download={part.filename ?? true}>
              {part.filename ?? part.mediaType}
            </a>
          );
        }
        if (part.type === 'source-url') {
          return (
            <a key={key} className="source" href={part.url} target="_blank" rel="noreferrer noopener">
              {part.title ?? part.url}
            </a>
          );
        }
        if (part.type === 'data-transcription') {
          // Live: what the user said, as the gateway transcribed it.
          return (
            <p key={key} className="transcription" data-testid="transcription" data-finished={part.data.finished}>
              <span className="muted">You said: </span>
              {part.data.text}
            </p>
          );
        }
        if (isToolUIPart(part)) {
          const answer = part.approval?.id ? answers?.[part.approval.id] : undefined;
          const answerable = onAnswer && part.approval?.id;
          return (
            <ToolPart
              key={key}
              part={part}
              answer={answer}
              onAnswer={answerable ? (approved, reason) => onAnswer(part.approval.id, approved, reason) : undefined}
            />
          );
        }
        return null;
      })}
    </article>
  );
});

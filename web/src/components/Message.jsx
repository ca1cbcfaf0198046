import { getToolName, isToolUIPart } from 'ai';
import { memo } from 'react';
import { awaitsAnswer, callsAwaitingSignIn, groundingOf, SIGN_IN_TOOL, signInToolName, toolStatusOf } from '../parts.js';
import { FilePart } from './FilePart.jsx';
import { Markdown } from './Markdown.jsx';
import { Sources } from './Sources.jsx';
import { ToolPart } from './ToolPart.jsx';
import { ToolSignIn } from './ToolSignIn.jsx';

/** Parts shown elsewhere: under the message (grounding), in their tool (status), in the state panel. */
const SHOWN_ELSEWHERE = new Set(['source-url', 'source-document', 'data-search-suggestions', 'data-tool-status', 'data-state']);

/**
 * One message and its parts. `onAnswer(approvalId, approved, reason)` answers approvals;
 * `answers` holds answers sent but not yet shown by the part (live sessions); `onToolOutput`
 * (`addToolOutput`, given to the chat's last message) answers long-running calls and sign-ins.
 * `interrupted` (live): 'cut' when the page stopped playing this answer (the user spoke over it,
 * pressed Interrupt, typed), 'ended' when the gateway ended the turn `interrupted`.
 * Memoized: while an answer streams, only its message renders again.
 */
export const Message = memo(function Message({ message, onAnswer, onToolOutput, answers, live = false, interrupted }) {
  const streaming = message.parts.some(part => part.state === 'streaming');
  const who = message.role === 'user' ? 'You' : live ? 'Assistant (voice)' : 'Assistant';
  const grounding = groundingOf(message);
  const signingIn = callsAwaitingSignIn(message);
  let steps = 0;
  return (
    <article
      className={`message ${message.role}`}
      data-testid="message"
      data-role={message.role}
      data-live={live || undefined}
      data-interrupted={interrupted}
      aria-label={who}
      aria-busy={streaming || undefined}
    >
      <div className="role" aria-hidden="true">
        {who}
      </div>
      {message.parts.map((part, index) => {
        const key = `${message.id}-${index}`;
        if (part.type === 'step-start') return steps++ > 0 ? <hr key={key} /> : null;
        if (SHOWN_ELSEWHERE.has(part.type)) return null;
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
        if (part.type === 'file') return <FilePart key={key} part={part} />;
        if (part.type === 'data-agent') {
          // The agent that speaks from this step on (multi-agent apps: a transfer, a pipeline).
          return (
            <p key={key} className="agent" data-testid="agent-label" data-agent={part.data?.name}>
              <span className="visually-hidden">Agent: </span>
              {part.data?.name}
            </p>
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
        if (isToolUIPart(part) && getToolName(part) === SIGN_IN_TOOL) {
          return (
            <ToolSignIn key={key} part={part} toolName={signInToolName(message, part)} onOutput={onToolOutput} />
          );
        }
        if (isToolUIPart(part)) {
          const answer = part.approval?.id ? answers?.[part.approval.id] : undefined;
          const answerable = onAnswer && part.approval?.id;
          const waiting = awaitsAnswer(part);
          return (
            <ToolPart
              key={key}
              part={part}
              answer={answer}
              onAnswer={answerable ? (approved, reason) => onAnswer(part.approval.id, approved, reason) : undefined}
              waiting={waiting}
              signingIn={signingIn.has(part.toolCallId)}
              status={waiting ? toolStatusOf(message, part.toolCallId) : undefined}
              onOutput={
                waiting && onToolOutput
                  ? output => onToolOutput({ tool: getToolName(part), toolCallId: part.toolCallId, output })
                  : undefined
              }
            />
          );
        }
        return null;
      })}
      {interrupted && (
        <p className="interrupted" data-testid="answer-interrupted">
          {interrupted === 'cut' ? 'Interrupted: the rest of this answer was not played.' : 'Interrupted.'}
        </p>
      )}
      {(grounding.sources.length > 0 || grounding.suggestions.length > 0) && (
        <Sources id={message.id} {...grounding} />
      )}
    </article>
  );
});

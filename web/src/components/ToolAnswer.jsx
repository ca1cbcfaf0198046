import { useId, useState } from 'react';

const json = value => JSON.stringify(value, null, 2);
const DEFAULT_ANSWER = '{"status": "approved"}';

/**
 * A long-running tool's call waiting for an answer from outside (ADK `LongRunningFunctionTool`):
 * its latest interim result, and a form that answers it with `onOutput(output)` (the chat then
 * sends it: the page's `sendAutomaticallyWhen`). Without `onOutput` (not the chat's last message,
 * or a live turn) it only shows that it waits.
 */
export function ToolAnswer({ status, onOutput }) {
  const [text, setText] = useState(DEFAULT_ANSWER);
  const [problem, setProblem] = useState('');
  const id = useId();
  const submit = event => {
    event.preventDefault();
    let output;
    try {
      output = JSON.parse(text);
    } catch {
      setProblem('The answer must be JSON, e.g. {"status": "approved"}.');
      return;
    }
    setProblem('');
    onOutput(output);
  };
  return (
    <div className="tool-answer" data-testid="tool-waiting">
      {status?.output !== undefined && (
        <>
          <p className="caption">Latest status</p>
          <pre className="json" data-testid="tool-status" aria-label="latest status">
            {json(status.output)}
          </pre>
        </>
      )}
      {onOutput && (
        <form onSubmit={submit} data-testid="tool-answer-form">
          <label htmlFor={`${id}-answer`}>Answer (JSON)</label>
          <div className="row">
            <textarea
              id={`${id}-answer`}
              data-testid="tool-answer-input"
              rows={2}
              spellCheck={false}
              value={text}
              aria-invalid={problem ? true : undefined}
              aria-describedby={problem ? `${id}-problem` : undefined}
              onChange={event => setText(event.target.value)}
            />
            <button type="submit" className="allow" data-testid="tool-answer-submit">
              Answer
            </button>
          </div>
          {problem && (
            <p id={`${id}-problem`} className="problem" role="alert">
              {problem}
            </p>
          )}
        </form>
      )}
    </div>
  );
}

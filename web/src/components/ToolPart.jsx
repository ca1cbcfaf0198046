import { getToolName } from 'ai';
import { browserTools } from '../tools.js';
import { ToolAnswer } from './ToolAnswer.jsx';

/** The five answers to an approval, and what each sends (`addToolApprovalResponse` or `live-approval`). */
export const ANSWERS = [
  { label: 'Allow once', testid: 'approve-once', approved: true },
  { label: 'Always allow', testid: 'approve-always', approved: true, reason: 'always' },
  { label: 'Deny', testid: 'deny', approved: false },
  { label: 'Deny and stop', testid: 'deny-stop', approved: false, reason: 'stop' },
  { label: 'Never allow', testid: 'never', approved: false, reason: 'never' },
];

const STATES = {
  'input-streaming': 'Preparing…',
  'input-available': 'Running…',
  'approval-requested': 'Waiting for your answer',
  'approval-responded': 'Answered',
  'output-available': 'Done',
  'output-error': 'Failed',
  'output-denied': 'Denied',
};

function decisionText({ approved, reason }) {
  if (approved) return reason === 'always' ? 'Always allowed' : 'Allowed once';
  if (reason === 'never') return 'Never allowed';
  if (reason === 'stop') return 'Denied and stopped';
  return 'Denied';
}

const json = value => JSON.stringify(value, null, 2);

/** Where the tool runs: on the server, in this page, or elsewhere (an answer the app gives). */
function whereItRuns(part, name) {
  if (part.providerExecuted) return 'server';
  return browserTools[name] ? 'browser' : 'app';
}

/**
 * A tool call, rendered by its state. `onAnswer(approved, reason)` answers its approval request;
 * `answer` is an answer already sent that the part does not show yet (live sessions). A call
 * whose tool asked for the user's sign-in says so (`signingIn`). A long-running call (`waiting`)
 * shows its latest interim result (`status`) and a form whose answer goes to `onOutput(output)`.
 */
export function ToolPart({ part, onAnswer, answer, waiting = false, signingIn = false, status, onOutput }) {
  const name = getToolName(part);
  const approval = part.approval?.approved !== undefined ? part.approval : answer;
  const asking = part.state === 'approval-requested' && approval == null && onAnswer != null;
  const headingId = `tool-${part.toolCallId}`;
  return (
    <section
      className={`tool state-${part.state}${waiting ? ' waiting' : ''}`}
      data-testid="tool-part"
      data-tool-name={name}
      data-state={part.state}
      aria-labelledby={headingId}
    >
      <header>
        <span id={headingId} className="tool-name">
          {name}
        </span>
        <span className="badge">{whereItRuns(part, name)}</span>
        <span className="badge state" data-testid="tool-state">
          {waiting ? 'Waiting for an answer' : signingIn ? 'Waiting for sign-in' : (STATES[part.state] ?? part.state)}
        </span>
      </header>
      {part.input !== undefined && (
        <pre className="json" data-testid="tool-input" aria-label="input">
          {json(part.input)}
        </pre>
      )}
      {waiting && <ToolAnswer status={status} onOutput={onOutput} />}
      {asking && (
        <div className="answers" role="group" aria-label={`Run ${name}?`} data-testid="approval-buttons">
          {ANSWERS.map(({ label, testid, approved, reason }) => (
            <button
              key={testid}
              type="button"
              className={approved ? 'allow' : 'deny'}
              data-testid={testid}
              onClick={() => onAnswer(approved, reason)}
            >
              {label}
            </button>
          ))}
        </div>
      )}
      {approval != null && (
        <p className={approval.approved ? 'decision' : 'decision denied'} data-testid="approval-decision">
          {decisionText(approval)}
        </p>
      )}
      {part.state === 'output-available' && (
        <pre className="json" data-testid="tool-output" aria-label="output">
          {json(part.output)}
        </pre>
      )}
      {part.state === 'output-error' && (
        <p className="problem" data-testid="tool-error">
          {part.errorText}
        </p>
      )}
      {part.state === 'output-denied' && approval?.reason === 'stop' && (
        <p className="interrupted" data-testid="interrupted">
          Stopped: the agent was told the run was interrupted by you, and the turn ended here.
        </p>
      )}
    </section>
  );
}

/**
 * The page's `sendAutomaticallyWhen` (src/predicates.js) with the gateway's ADK parts: a
 * long-running tool's call and a tool sign-in (`adk_request_credential`) are answered with
 * `addToolOutput`, after which it must send exactly once: true once the call has its output, false
 * while it waits, and false again after the continuation (which opens a new step). Messages as the
 * gateway's chunks build them. Run: `npm test` (ai 6 here, see test/ai6-hooks.mjs).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { sendAutomaticallyWhen } from '../src/predicates.js';

const user = { id: 'u1', role: 'user', parts: [{ type: 'text', text: 'go' }] };
const assistant = parts => ({ id: 'a1', role: 'assistant', parts });
const resend = parts => sendAutomaticallyWhen({ messages: [user, assistant(parts)] });

const waitingCall = {
  type: 'tool-ask_for_approval',
  toolCallId: 'c1',
  state: 'input-available',
  input: { purpose: 'a team dinner', amount: 250 },
};
const status = {
  type: 'data-tool-status',
  id: 'tool-status-c1',
  data: { toolCallId: 'c1', toolName: 'ask_for_approval', output: { status: 'pending' } },
};
const firstStep = [
  { type: 'step-start' },
  { type: 'data-agent', data: { name: 'reimbursement_agent' } },
  { type: 'text', text: 'Your request is waiting for approval.', state: 'done' },
];

test('a long-running call: no send while it waits, one after its answer, none after the continuation', () => {
  assert.equal(resend([...firstStep, waitingCall, status]), false);
  const answered = { ...waitingCall, state: 'output-available', output: { status: 'approved' } };
  assert.equal(resend([...firstStep, answered, status]), true);
  const continuation = [
    { type: 'step-start' },
    { type: 'tool-reimburse', toolCallId: 'c2', state: 'output-available', input: {}, output: { status: 'ok' }, providerExecuted: true },
    { type: 'step-start' },
    { type: 'text', text: 'Done: $250.00 reimbursed for a team dinner.', state: 'done' },
  ];
  assert.equal(resend([...firstStep, answered, status, ...continuation]), false);
});

test('a sign-in: the server tool waiting beside it does not hold the send back', () => {
  const calendar = { type: 'tool-list_calendar_events', toolCallId: 't1', state: 'input-available', input: { day: 'today' }, providerExecuted: true };
  const credential = {
    type: 'tool-adk_request_credential',
    toolCallId: 'cred-1',
    state: 'input-available',
    input: { authUri: 'http://127.0.0.1:8095/authorize?state=x', toolCallId: 't1' },
  };
  const step = [{ type: 'step-start' }, { type: 'data-agent', data: { name: 'calendar_agent' } }, calendar];
  assert.equal(resend([...step, credential]), false);
  assert.equal(resend([...step, { ...credential, state: 'output-available', output: { signedIn: true } }]), true);
  const gaveUp = { ...credential, state: 'output-error', errorText: 'Sign-in was not completed.' };
  assert.equal(resend([...step, gaveUp]), true);
  const continuation = [
    { type: 'step-start' },
    { type: 'text', text: 'You have 2 events today: Standup at 09:00, Design review at 14:00.', state: 'done' },
  ];
  const signedIn = { ...credential, state: 'output-available', output: { signedIn: true } };
  assert.equal(resend([...step, signedIn, ...continuation]), false);
});

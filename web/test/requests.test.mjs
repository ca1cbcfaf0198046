/**
 * Last-message requests (src/requests.js): what the transports send when the gateway keeps the
 * chat's history, and which messages a chat opens with (the gateway's, then what this tab sent
 * that the gateway has not recorded yet). Run: `npm test`.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { lastMessageFrame, lastMessageRequest, withPendingTail } from '../src/requests.js';

const user = (id, text) => ({ id, role: 'user', parts: [{ type: 'text', text }] });
const payment = (id, state, extra = {}) => ({
  id,
  role: 'assistant',
  parts: [{ type: 'step-start' }, { type: 'tool-process_payment', toolCallId: 'c1', state, input: { amount: 5 }, ...extra }],
});
const history = [user('u1', 'hi'), { id: 'a1', role: 'assistant', parts: [{ type: 'text', text: 'hello', state: 'done' }] }, user('u2', 'pay')];

test('an SSE body carries the last message, the trigger and the extra body fields', () => {
  const request = lastMessageRequest({
    id: 'chat1',
    messages: history,
    body: { app: 'demo' },
    trigger: 'submit-message',
    messageId: undefined,
  });
  assert.deepEqual(JSON.parse(JSON.stringify(request.body)), {
    app: 'demo',
    id: 'chat1',
    message: history[2],
    trigger: 'submit-message',
  });
  assert.equal('messages' in request.body, false);
});

test('a regenerate names its trigger and message', () => {
  const { body } = lastMessageRequest({ id: 'c', messages: history, body: {}, trigger: 'regenerate-message', messageId: 'a1' });
  assert.equal(body.trigger, 'regenerate-message');
  assert.equal(body.messageId, 'a1');
  assert.equal(body.message, history[2]);
});

test('a WebSocket send frame carries one message, also in its body', () => {
  const frame = lastMessageFrame({ messages: history, body: { app: 'demo' } });
  assert.deepEqual(frame.messages, [history[2]]);
  assert.deepEqual(frame.body, { app: 'demo', message: history[2] });
});

test("the gateway's messages, when the tab has nothing more", () => {
  assert.equal(withPendingTail(history, []), history);
  assert.equal(withPendingTail(history, history.slice(0, 2)), history);
  assert.equal(withPendingTail(history, undefined), history);
});

test('a question the gateway has not recorded yet (a reload during its answer) is kept', () => {
  const server = history.slice(0, 2);
  assert.deepEqual(withPendingTail(server, history), history);
  const partial = { id: 'a2', role: 'assistant', parts: [{ type: 'text', text: 'tok0', state: 'streaming' }] };
  assert.deepEqual(withPendingTail(server, [...history, partial]), [...history, partial]);
});

test("another device went on: the gateway's history wins", () => {
  const server = [...history.slice(0, 2), user('u9', 'from the other device')];
  assert.equal(withPendingTail(server, [...history, user('u3', 'more')]), server);
});

test('an approval answered here that the gateway still asks is kept; one answered elsewhere is not', () => {
  const asked = [user('u1', 'pay'), payment('a1', 'approval-requested', { approval: { id: 'x' } })];
  const answered = [asked[0], payment('a1', 'approval-responded', { approval: { id: 'x', approved: true } })];
  assert.deepEqual(withPendingTail(asked, answered), answered);
  const done = [asked[0], payment('a1', 'output-available', { output: { ok: true } })];
  assert.equal(withPendingTail(done, answered), done);
  assert.equal(withPendingTail(asked, asked), asked);
});

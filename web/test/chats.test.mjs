/**
 * The page's client of the gateway's chats API (src/chats.js): each call's method, URL, headers
 * and body, and how a refusal reads (`notFound`: no such chat; `unsupported`: an older gateway
 * without the API, for which the page keeps history itself). Run: `npm test`.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, test } from 'node:test';
import { deleteChat, listChats, loadChat, renameChat } from '../src/chats.js';

let calls;
let answer;
const saved = {};

beforeEach(() => {
  calls = [];
  answer = () => new Response(JSON.stringify({ chats: [] }), { status: 200, headers: { 'Content-Type': 'application/json' } });
  for (const name of ['fetch', 'document', 'window']) saved[name] = globalThis[name];
  globalThis.document = { querySelector: () => null }; // no <meta name="adk-gateway-url">: the page's origin
  globalThis.window = { location: { href: 'http://gateway.test/?chat=x' } };
  globalThis.fetch = async (url, init) => {
    calls.push({ url, ...init });
    return answer();
  };
});

afterEach(() => {
  for (const [name, value] of Object.entries(saved)) globalThis[name] = value;
});

const json = (status, body) => () => new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } });

test('the list: limit, app and cursor in the query, the token as a bearer', async () => {
  await listChats({ token: 't0k', app: 'demo agent', cursor: 'abc' });
  assert.equal(calls[0].url, 'http://gateway.test/api/chats?limit=50&app=demo+agent&cursor=abc');
  assert.equal(calls[0].method, 'GET');
  assert.deepEqual(calls[0].headers, { Authorization: 'Bearer t0k' });
});

test('load, rename and delete name the chat (and its app); no token, no header', async () => {
  answer = json(200, { id: 'a/b', messages: [] });
  await loadChat({ token: '', id: 'a/b', app: 'demo' });
  assert.equal(calls[0].url, 'http://gateway.test/api/chats/a%2Fb?app=demo');
  assert.deepEqual(calls[0].headers, {});
  await renameChat({ token: 't', id: 'c1', title: 'New title' });
  assert.equal(calls[1].method, 'PATCH');
  assert.equal(calls[1].url, 'http://gateway.test/api/chats/c1');
  assert.equal(calls[1].headers['Content-Type'], 'application/json');
  assert.equal(calls[1].body, '{"title":"New title"}');
  answer = () => new Response(null, { status: 204 });
  assert.equal(await deleteChat({ token: 't', id: 'c1' }), null);
  assert.equal(calls[2].method, 'DELETE');
  assert.equal(calls[2].body, undefined);
});

test('an unknown chat is not found; a gateway without the API is unsupported', async () => {
  answer = json(404, { error: { code: 'not_found', message: 'No such chat.' } });
  const missing = await loadChat({ token: '', id: 'gone' }).catch(error => error);
  assert.equal(missing.status, 404);
  assert.equal(missing.message, 'No such chat.');
  assert.equal(missing.notFound, true);
  assert.equal(missing.unsupported, false);
  answer = () => new Response('404: Not Found', { status: 404 });
  const older = await listChats({ token: '' }).catch(error => error);
  assert.equal(older.notFound, false);
  assert.equal(older.unsupported, true);
  globalThis.fetch = async () => {
    throw new TypeError('Failed to fetch');
  };
  const offline = await listChats({ token: '' }).catch(error => error);
  assert.equal(offline.status, 0);
  assert.equal(offline.unsupported, false);
});

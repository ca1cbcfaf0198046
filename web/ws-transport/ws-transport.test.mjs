/**
 * Unit tests of ws-transport.js against a throwaway `ws` server on
 * 127.0.0.1 that scripts the frames of ai 7's WebSocketChatTransport protocol
 * (start, chunk{sequence}, end, error, no-active), plus a headless ai 6
 * AbstractChat round trip over it. Run: `npm test` in web/ (node --test, with
 * test/ai6-hooks.mjs: `ai` is ai 6 here, the version the port is for).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as ai from 'ai';
import { WebSocket, WebSocketServer } from 'ws';
import { WebSocketChatTransport } from './ws-transport.js';

const { AbstractChat } = ai;

/** The two SDK predicates combined, as an ai 6 page with browser tools and approvals uses them. */
const sendAutomaticallyWhen = options =>
  ai.lastAssistantMessageIsCompleteWithApprovalResponses(options) ||
  ai.lastAssistantMessageIsCompleteWithToolCalls(options);

test('the port is tested against ai 6 (which has no WebSocketChatTransport of its own)', () => {
  assert.equal(typeof ai.AbstractChat, 'function');
  assert.equal(ai.WebSocketChatTransport, undefined);
});

/** A ws server whose `handler(frame, socket, server)` answers each client frame. */
async function startServer() {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise(resolve => wss.once('listening', resolve));
  const server = {
    wss,
    url: `ws://127.0.0.1:${wss.address().port}/api/chat/ws`,
    /** every client frame, parsed */
    frames: [],
    /** close events seen on the server side: {code, reason} */
    closes: [],
    /** the request URL (path and query) of each connection */
    urls: [],
    connections: 0,
    generation: 0,
    /** forget the frames and closes of earlier tests (their sockets may close late) */
    reset() {
      this.generation++;
      this.frames = [];
      this.closes = [];
      this.urls = [];
    },
    handler: (_frame, _socket) => {},
    reply(socket, frame) {
      socket.send(JSON.stringify(frame));
    },
  };
  wss.on('connection', (socket, request) => {
    server.connections++;
    const generation = server.generation;
    server.urls.push(request.url);
    socket.on('message', data => {
      const frame = JSON.parse(String(data));
      if (generation === server.generation) server.frames.push(frame);
      server.handler(frame, socket);
    });
    socket.on('close', (code, reason) => {
      if (generation === server.generation) server.closes.push({ code, reason: String(reason) });
    });
  });
  return server;
}

const textChunks = (id, words) => [
  { type: 'start', messageId: 'asst-1' },
  { type: 'start-step' },
  { type: 'text-start', id },
  ...words.map(delta => ({ type: 'text-delta', id, delta })),
  { type: 'text-end', id },
  { type: 'finish-step' },
  { type: 'finish', finishReason: 'stop' },
];

/** Replies start, chunk seq 0..n, end. */
function replayAll(server, socket, requestId, chunks, { start = true } = {}) {
  if (start) server.reply(socket, { type: 'start', requestId });
  chunks.forEach((chunk, sequence) =>
    server.reply(socket, { type: 'chunk', requestId, sequence, chunk }),
  );
  server.reply(socket, { type: 'end', requestId });
}

async function readAll(stream) {
  const chunks = [];
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return chunks;
    chunks.push(value);
  }
}

async function readError(stream) {
  try {
    await readAll(stream);
  } catch (error) {
    return error;
  }
  assert.fail('the stream ended without an error');
}

const delay = ms => new Promise(resolve => setTimeout(resolve, ms));

async function waitFor(predicate, ms = 2000) {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) assert.fail('timed out waiting');
    await delay(5);
  }
}

const userMessage = { id: 'u1', role: 'user', parts: [{ type: 'text', text: 'hi' }] };

function sendOptions(extra = {}) {
  return {
    trigger: 'submit-message',
    chatId: 'chat-1',
    messageId: undefined,
    messages: [userMessage],
    abortSignal: undefined,
    ...extra,
  };
}

describe('WebSocketChatTransport', () => {
  let server;
  before(async () => {
    server = await startServer();
  });
  after(async () => {
    for (const client of server.wss.clients) client.terminate();
    await new Promise(resolve => server.wss.close(resolve));
  });

  const transportFor = options =>
    new WebSocketChatTransport({ url: server.url, WebSocket, ...options });

  test('send frame, chunks in order, end closes the stream', async () => {
    server.reset();
    server.handler = (frame, socket) => {
      if (frame.type === 'send') replayAll(server, socket, frame.requestId, textChunks('t', ['a ', 'b']));
    };
    const transport = transportFor({
      headers: { 'X-AI-SDK-Major': '6', Authorization: 'Bearer t' },
      body: { agent: 'demo_agent', scenario: 'x' },
    });
    assert.equal(transport.resumeStreamIsReplay, true);
    assert.equal(transport.connected, false, 'lazy: no socket before the first request');
    const stream = await transport.sendMessages(
      sendOptions({ headers: { 'x-extra': '1' }, body: { scenario: 'y' }, metadata: { m: 1 } }),
    );
    const chunks = await readAll(stream);
    assert.deepEqual(chunks.map(c => c.type), textChunks('t', ['a ', 'b']).map(c => c.type));
    assert.equal(chunks.filter(c => c.type === 'text-delta').map(c => c.delta).join(''), 'a b');
    const [frame] = server.frames;
    assert.equal(frame.type, 'send');
    assert.equal(typeof frame.requestId, 'string');
    assert.equal(frame.id, 'chat-1');
    assert.equal(frame.trigger, 'submit-message');
    assert.equal('messageId' in frame, false, 'undefined messageId is left out by JSON');
    assert.deepEqual(frame.messages, [userMessage]);
    assert.deepEqual(frame.headers, { 'x-ai-sdk-major': '6', authorization: 'Bearer t', 'x-extra': '1' });
    assert.deepEqual(frame.body, { agent: 'demo_agent', scenario: 'y' });
    assert.deepEqual(frame.metadata, { m: 1 });
    assert.equal(transport.activeRequestCount, 0);
    transport.close();
  });

  test('one socket carries many requests; duplicates (sequence <= last) are ignored', async () => {
    const before = server.connections;
    server.handler = (frame, socket) => {
      if (frame.type !== 'send') return;
      const chunks = textChunks('t', [frame.messages[0].parts[0].text]);
      server.reply(socket, { type: 'chunk', requestId: frame.requestId, sequence: 0, chunk: chunks[0] });
      server.reply(socket, { type: 'chunk', requestId: frame.requestId, sequence: 0, chunk: chunks[0] });
      for (let i = 1; i < chunks.length; i++) {
        server.reply(socket, { type: 'chunk', requestId: frame.requestId, sequence: i, chunk: chunks[i] });
        server.reply(socket, { type: 'chunk', requestId: frame.requestId, sequence: i - 1, chunk: chunks[i - 1] });
      }
      server.reply(socket, { type: 'chunk', requestId: 'unknown-request', sequence: 0, chunk: chunks[0] });
      server.reply(socket, { type: 'end', requestId: frame.requestId });
    };
    const transport = transportFor();
    const message = text => ({ id: text, role: 'user', parts: [{ type: 'text', text }] });
    const streams = await Promise.all(
      ['one', 'two', 'three'].map(text => transport.sendMessages(sendOptions({ messages: [message(text)] }))),
    );
    const results = await Promise.all(streams.map(readAll));
    assert.deepEqual(
      results.map(chunks => chunks.filter(c => c.type === 'text-delta').map(c => c.delta).join('')),
      ['one', 'two', 'three'],
    );
    for (const chunks of results) assert.equal(chunks.length, 7);
    assert.equal(server.connections, before + 1, 'one connection for all requests');
    transport.close();
  });

  test('a sequence gap tears the socket down (1011) and errors every active request', async () => {
    server.reset();
    let first;
    server.handler = (frame, socket) => {
      if (frame.type !== 'send') return;
      if (first == null) {
        first = frame.requestId; // stays open
        server.reply(socket, { type: 'chunk', requestId: frame.requestId, sequence: 0, chunk: { type: 'start' } });
        return;
      }
      server.reply(socket, { type: 'chunk', requestId: frame.requestId, sequence: 0, chunk: { type: 'start' } });
      server.reply(socket, { type: 'chunk', requestId: frame.requestId, sequence: 2, chunk: { type: 'start-step' } });
    };
    const transport = transportFor();
    const a = await transport.sendMessages(sendOptions());
    const readerA = readError(a);
    await waitFor(() => first != null);
    const b = await transport.sendMessages(sendOptions());
    const [errorA, errorB] = await Promise.all([readerA, readError(b)]);
    assert.match(errorB.message, /Out-of-order WebSocket chat chunk sequence/);
    assert.equal(errorA, errorB, 'both requests fail with the same error');
    await waitFor(() => server.closes.length === 1);
    assert.equal(server.closes[0].code, 1011);
    assert.equal(transport.connected, false);
  });

  for (const [name, badFrame, pattern] of [
    ['an invalid chunk', rid => ({ type: 'chunk', requestId: rid, sequence: 0, chunk: { type: 'text-delta', id: 't' } }), /Invalid UI message chunk/],
    ['a null optional field', rid => ({ type: 'chunk', requestId: rid, sequence: 0, chunk: { type: 'start', messageId: null } }), /Invalid UI message chunk/],
    ['an unknown frame type', rid => ({ type: 'progress', requestId: rid }), /Unknown WebSocket chat response type: progress/],
    ['a non-JSON frame', () => 'not json', /Invalid WebSocket chat response frame/],
    ['a bad sequence', rid => ({ type: 'chunk', requestId: rid, sequence: -1, chunk: { type: 'start' } }), /Invalid WebSocket chat chunk sequence/],
  ]) {
    test(`${name} tears the socket down`, async () => {
      server.reset();
      server.handler = (frame, socket) => {
        if (frame.type !== 'send') return;
        const bad = badFrame(frame.requestId);
        socket.send(typeof bad === 'string' ? bad : JSON.stringify(bad));
      };
      const transport = transportFor();
      const error = await readError(await transport.sendMessages(sendOptions()));
      assert.match(error.message, pattern);
      await waitFor(() => server.closes.length === 1);
      assert.equal(server.closes[0].code, 1011);
    });
  }

  test('validate: false lets unknown chunk types through', async () => {
    server.handler = (frame, socket) => {
      if (frame.type === 'send') replayAll(server, socket, frame.requestId, [{ type: 'reset-step' }]);
    };
    const transport = transportFor({ validate: false });
    assert.deepEqual(await readAll(await transport.sendMessages(sendOptions())), [{ type: 'reset-step' }]);
    transport.close();
  });

  test('an error frame fails only that request, with errorText; the socket stays', async () => {
    server.reset();
    server.handler = (frame, socket) => {
      if (frame.type !== 'send') return;
      const text = frame.messages[0].parts[0].text;
      if (text === 'fail') server.reply(socket, { type: 'error', requestId: frame.requestId, errorText: 'model failed' });
      else if (text === 'fail-silent') server.reply(socket, { type: 'error', requestId: frame.requestId });
      else replayAll(server, socket, frame.requestId, textChunks('t', ['ok']));
    };
    const transport = transportFor();
    const message = text => [{ id: text, role: 'user', parts: [{ type: 'text', text }] }];
    const error = await readError(await transport.sendMessages(sendOptions({ messages: message('fail') })));
    assert.equal(error.message, 'model failed');
    assert.notEqual(error.name, 'TypeError');
    const silent = await readError(await transport.sendMessages(sendOptions({ messages: message('fail-silent') })));
    assert.equal(silent.message, 'WebSocket chat server returned an error.');
    const ok = await readAll(await transport.sendMessages(sendOptions({ messages: message('fine') })));
    assert.equal(ok.length, 7);
    assert.equal(server.closes.length, 0);
    transport.close();
  });

  test('resume: no-active resolves null; start + replay resolves the stream', async () => {
    server.reset();
    server.handler = (frame, socket) => {
      if (frame.type !== 'resume') return;
      if (frame.id === 'idle') server.reply(socket, { type: 'no-active', requestId: frame.requestId });
      else replayAll(server, socket, frame.requestId, textChunks('t', ['again']));
    };
    const transport = transportFor({ headers: () => ({ 'X-A': 'b' }), body: async () => ({ k: 1 }) });
    assert.equal(await transport.reconnectToStream({ chatId: 'idle' }), null);
    const stream = await transport.reconnectToStream({ chatId: 'busy', body: { j: 2 } });
    assert.equal((await readAll(stream)).length, 7);
    const [idle, busy] = server.frames;
    assert.equal(idle.type, 'resume');
    assert.equal(idle.id, 'idle');
    assert.equal('lastSequence' in idle, false, 'lastSequence omitted: full replay');
    assert.deepEqual(idle.headers, { 'x-a': 'b' });
    assert.deepEqual(busy.body, { k: 1, j: 2 });
    transport.close();
  });

  test('resume: an error frame before start rejects the promise', async () => {
    server.handler = (frame, socket) => {
      if (frame.type === 'resume') server.reply(socket, { type: 'error', requestId: frame.requestId, errorText: 'nope' });
    };
    const transport = transportFor();
    await assert.rejects(transport.reconnectToStream({ chatId: 'x' }), /nope/);
    transport.close();
  });

  test('abort sends an abort frame, closes the stream and keeps the socket', async () => {
    server.reset();
    server.handler = (frame, socket) => {
      if (frame.type === 'send' && frame.messages[0].parts[0].text === 'hang') {
        server.reply(socket, { type: 'chunk', requestId: frame.requestId, sequence: 0, chunk: { type: 'start' } });
      } else if (frame.type === 'send') {
        replayAll(server, socket, frame.requestId, textChunks('t', ['after']));
      }
    };
    const transport = transportFor();
    const controller = new AbortController();
    const stream = await transport.sendMessages(
      sendOptions({ abortSignal: controller.signal, messages: [{ id: 'h', role: 'user', parts: [{ type: 'text', text: 'hang' }] }] }),
    );
    const reader = stream.getReader();
    assert.deepEqual((await reader.read()).value, { type: 'start' });
    controller.abort();
    assert.equal((await reader.read()).done, true, 'abort closes the stream');
    await waitFor(() => server.frames.some(f => f.type === 'abort'));
    const sendFrame = server.frames.find(f => f.type === 'send');
    assert.deepEqual(server.frames.find(f => f.type === 'abort'), { type: 'abort', requestId: sendFrame.requestId });
    assert.equal(transport.connected, true);
    const connections = server.connections;
    assert.equal((await readAll(await transport.sendMessages(sendOptions()))).length, 7);
    assert.equal(server.connections, connections, 'the same socket is reused');
    assert.equal(server.closes.length, 0);
    transport.close();
  });

  test('an already aborted signal rejects with an AbortError before sending', async () => {
    const transport = transportFor();
    const controller = new AbortController();
    controller.abort();
    await assert.rejects(transport.sendMessages(sendOptions({ abortSignal: controller.signal })), { name: 'AbortError' });
    transport.close();
  });

  test('a socket closed by the server errors active requests with a network TypeError', async () => {
    server.handler = (frame, socket) => {
      if (frame.type !== 'send') return;
      server.reply(socket, { type: 'chunk', requestId: frame.requestId, sequence: 0, chunk: { type: 'start' } });
      setTimeout(() => socket.close(1001, 'going away'), 20);
    };
    const transport = transportFor();
    const error = await readError(await transport.sendMessages(sendOptions()));
    assert.ok(error instanceof TypeError);
    assert.match(error.message, /network/);
    assert.equal(error.message, 'WebSocket chat network connection closed (code 1001: going away).');
    // The next request opens a new socket.
    server.handler = (frame, socket) => {
      if (frame.type === 'send') replayAll(server, socket, frame.requestId, textChunks('t', ['x']));
    };
    assert.equal((await readAll(await transport.sendMessages(sendOptions()))).length, 7);
    transport.close();
  });

  test('a refused connection rejects with a network TypeError', async () => {
    const transport = new WebSocketChatTransport({ url: 'ws://127.0.0.1:9/api/chat/ws', WebSocket });
    await assert.rejects(transport.sendMessages(sendOptions()), error => error instanceof TypeError && /network/.test(error.message));
  });

  test('close() errors active streams; a later request reconnects', async () => {
    server.handler = (frame, socket) => {
      if (frame.type === 'send') server.reply(socket, { type: 'start', requestId: frame.requestId });
    };
    const transport = transportFor();
    const stream = await transport.sendMessages(sendOptions());
    transport.close();
    const error = await readError(stream);
    assert.equal(error.message, 'WebSocket chat transport was closed.');
  });

  test('params are resolved for each new connection (a changed token applies after close())', async () => {
    server.reset();
    server.handler = (frame, socket) => {
      if (frame.type === 'send') replayAll(server, socket, frame.requestId, textChunks('t', ['ok']));
    };
    let token = 'first';
    const transport = transportFor({ params: () => (token ? { access_token: token } : {}) });
    await readAll(await transport.sendMessages(sendOptions()));
    token = 'second';
    await readAll(await transport.sendMessages(sendOptions()));
    assert.deepEqual(server.urls, ['/api/chat/ws?access_token=first']);
    transport.close();
    await readAll(await transport.sendMessages(sendOptions()));
    token = null;
    transport.close();
    await readAll(await transport.sendMessages(sendOptions()));
    assert.deepEqual(server.urls, [
      '/api/chat/ws?access_token=first',
      '/api/chat/ws?access_token=second',
      '/api/chat/ws',
    ]);
    for (const frame of server.frames) assert.deepEqual(frame.headers, {});
    transport.close();
  });

  test('no url outside a browser is a clear error', async () => {
    const transport = new WebSocketChatTransport({ WebSocket });
    await assert.rejects(transport.sendMessages(sendOptions()), /Invalid WebSocket chat URL/);
  });
});

// ---------------------------------------------------------------------------
// A headless ai 6 chat over the transport.

class TestState {
  constructor() {
    this.status = 'ready';
    this.error = undefined;
    this.messages = [];
  }
  pushMessage = m => {
    this.messages = this.messages.concat(m);
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (i, m) => {
    this.messages = [...this.messages.slice(0, i), structuredClone(m), ...this.messages.slice(i + 1)];
  };
  snapshot = v => structuredClone(v);
}

class TestChat extends AbstractChat {
  constructor(init) {
    super({ ...init, state: new TestState() });
  }
}

describe('AbstractChat (ai 6) over WebSocketChatTransport', () => {
  let server;
  before(async () => {
    server = await startServer();
  });
  after(async () => {
    for (const client of server.wss.clients) client.terminate();
    await new Promise(resolve => server.wss.close(resolve));
  });

  test('a browser tool with approval: 3 sends, the tool runs after approval, no loop', async () => {
    server.reset();
    const sends = [];
    server.handler = (frame, socket) => {
      if (frame.type !== 'send') return;
      sends.push(frame);
      const last = frame.messages.at(-1);
      const rid = frame.requestId;
      if (sends.length === 1) {
        replayAll(server, socket, rid, [
          { type: 'start', messageId: 'asst-1' },
          { type: 'start-step' },
          { type: 'tool-input-start', toolCallId: 'c1', toolName: 'change_bgm' },
          { type: 'tool-input-available', toolCallId: 'c1', toolName: 'change_bgm', input: { track: 2 } },
          { type: 'tool-approval-request', approvalId: 'ap-1', toolCallId: 'c1' },
          { type: 'finish-step' },
          { type: 'finish', finishReason: 'tool-calls' },
        ]);
      } else if (sends.length === 2) {
        assert.equal(last.parts.find(p => p.toolCallId === 'c1').state, 'approval-responded');
        replayAll(server, socket, rid, [
          { type: 'start', messageId: 'asst-1' },
          { type: 'tool-input-available', toolCallId: 'c1', toolName: 'change_bgm', input: { track: 2 } },
          { type: 'finish', finishReason: 'tool-calls' },
        ]);
      } else {
        const part = last.parts.find(p => p.toolCallId === 'c1');
        assert.equal(part.state, 'output-available');
        assert.deepEqual(part.output, { playing: 2 });
        replayAll(server, socket, rid, [
          { type: 'start', messageId: 'asst-1' },
          { type: 'start-step' },
          { type: 'text-start', id: 't' },
          { type: 'text-delta', id: 't', delta: 'change_bgm -> {"playing":2}' },
          { type: 'text-end', id: 't' },
          { type: 'finish-step' },
          { type: 'finish', finishReason: 'stop' },
        ]);
      }
    };
    const ran = [];
    let chat;
    chat = new TestChat({
      id: 'chat-tools',
      transport: new WebSocketChatTransport({ url: server.url, WebSocket }),
      sendAutomaticallyWhen,
      onToolCall: ({ toolCall }) => {
        const parts = chat.messages.flatMap(m => m.parts).filter(p => p.toolCallId === toolCall.toolCallId);
        if (!parts.some(p => p.approval?.approved === true)) return;
        ran.push(toolCall.toolCallId);
        void chat.addToolOutput({ tool: toolCall.toolName, toolCallId: toolCall.toolCallId, output: { playing: toolCall.input.track } });
      },
    });
    await chat.sendMessage({ text: '/tool change_bgm {"track": 2}' });
    assert.equal(chat.status, 'ready');
    assert.equal(chat.lastMessage.parts.find(p => p.toolCallId === 'c1').state, 'approval-requested');
    assert.deepEqual(ran, []);
    await chat.addToolApprovalResponse({ id: 'ap-1', approved: true });
    await waitFor(() => sends.length === 3 && chat.status === 'ready' && chat.lastMessage.parts.some(p => p.type === 'text'));
    await delay(100);
    assert.equal(sends.length, 3, 'no 4th send');
    assert.deepEqual(ran, ['c1']);
    assert.equal(sends[1].trigger, 'submit-message');
    assert.equal(sends[1].messageId, 'asst-1');
    assert.equal(sends[2].messageId, 'asst-1');
    assert.equal(chat.messages.length, 2);
    chat.transport?.close?.();
  });

  test('stop() sends abort and leaves the chat ready; a disconnect is resumable', async () => {
    server.reset();
    let mode = 'hang';
    server.handler = (frame, socket) => {
      if (frame.type === 'send') {
        server.reply(socket, { type: 'chunk', requestId: frame.requestId, sequence: 0, chunk: { type: 'start', messageId: 'a1' } });
        server.reply(socket, { type: 'chunk', requestId: frame.requestId, sequence: 1, chunk: { type: 'start-step' } });
        server.reply(socket, { type: 'chunk', requestId: frame.requestId, sequence: 2, chunk: { type: 'text-start', id: 't' } });
        if (mode === 'drop') setTimeout(() => socket.terminate(), 20);
      } else if (frame.type === 'resume') {
        replayAll(server, socket, frame.requestId, textChunks('t', ['resumed']));
      }
    };
    const finishes = [];
    const transport = new WebSocketChatTransport({ url: server.url, WebSocket });
    const chat = new TestChat({ id: 'chat-stop', transport, onFinish: f => finishes.push(f) });
    const sending = chat.sendMessage({ text: 'go' });
    await waitFor(() => chat.status === 'streaming');
    await chat.stop();
    await sending;
    assert.equal(chat.status, 'ready');
    await waitFor(() => server.frames.some(f => f.type === 'abort'));
    assert.equal(finishes.at(-1).isAbort, true);

    mode = 'drop';
    await chat.sendMessage({ text: 'again' });
    assert.equal(chat.status, 'error');
    assert.equal(finishes.at(-1).isDisconnect, true);
    assert.match(chat.error.message, /network/);
    await chat.resumeStream();
    assert.equal(chat.status, 'ready');
    assert.equal(chat.lastMessage.parts.find(p => p.type === 'text').text, 'resumed');
    transport.close();
  });
});

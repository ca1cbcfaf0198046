import { Chat as ChatState, useChat } from '@ai-sdk/react';
import { getToolName, isToolUIPart } from 'ai';
import { useCallback, useEffect, useRef, useState } from 'react';
import { useLiveVoice } from '../live/useLiveVoice.js';
import { latestState } from '../parts.js';
import { sendAutomaticallyWhen } from '../predicates.js';
import { loadMessages, saveMessages } from '../storage.js';
import { browserTools, mayRun, runBrowserTool } from '../tools.js';
import { createTransport, stopRun } from '../transport.js';
import { Composer } from './Composer.jsx';
import { Message } from './Message.jsx';
import { StatePanel } from './StatePanel.jsx';
import { VoicePanel } from './VoicePanel.jsx';

const STATUS_TEXT = { ready: 'Ready', submitted: 'Sending…', streaming: 'Answering…', error: 'Error' };

/** Runs a browser tool call if it may run now, and adds its output (which continues the chat). */
function runTool(chat, toolCall) {
  if (!mayRun(chat.messages, toolCall)) return; // announced with an approval request: wait
  const { toolName: tool, toolCallId } = toolCall;
  // Not awaited: addToolOutput waits for the chat's queue, which may be running onToolCall.
  runBrowserTool(toolCall, ({ output, errorText }) =>
    chat.addToolOutput(
      errorText == null ? { tool, toolCallId, output } : { tool, toolCallId, state: 'output-error', errorText },
    ),
  );
}

/** The chat's state: `useChat`'s Chat, with its transport and the browser tools. */
function createChat({ chatId, transport, onError }) {
  const chat = new ChatState({
    id: chatId,
    messages: loadMessages(chatId),
    transport,
    // Continue after an approval or a browser tool's output: the AI SDK's two predicates combined.
    sendAutomaticallyWhen,
    onToolCall: ({ toolCall }) => runTool(chat, toolCall),
    onError,
  });
  return chat;
}

/** Browser tool calls of the last message still waiting for their output (e.g. after a reload). */
function pendingToolCalls(messages) {
  const last = messages.at(-1);
  if (last?.role !== 'assistant') return [];
  return last.parts
    .filter(part => isToolUIPart(part) && part.state === 'input-available' && !part.providerExecuted)
    .map(part => ({ toolName: getToolName(part), toolCallId: part.toolCallId, input: part.input }))
    .filter(call => browserTools[call.toolName]);
}

/** The last `change_bgm` output: what the background music plays. */
function nowPlaying(messages) {
  for (const message of [...messages].reverse()) {
    for (const part of [...message.parts].reverse()) {
      if (isToolUIPart(part) && getToolName(part) === 'change_bgm' && part.state === 'output-available') {
        return part.output?.playing;
      }
    }
  }
  return undefined;
}

export function Chat({ chatId, transportKind, app, token, locked, onUnauthorized, onNetworkError }) {
  // Read by the transport on each request, so it always has the current token, app and callbacks.
  const latest = useRef({ token, app, onUnauthorized, onNetworkError });
  useEffect(() => {
    latest.current = { token, app, onUnauthorized, onNetworkError };
  });

  const [{ chat, transport }] = useState(() => {
    const transport = createTransport(transportKind, {
      getToken: () => latest.current.token,
      getApp: () => latest.current.app,
      onUnauthorized: () => latest.current.onUnauthorized(),
    });
    const chat = createChat({ chatId, transport, onError: () => latest.current.onNetworkError() });
    return { chat, transport };
  });
  // resume: a reload picks up an answer that is still running (GET …/stream or a `resume` frame).
  const { messages, status, error, sendMessage, stop, regenerate, clearError, addToolApprovalResponse, addToolOutput } =
    useChat({ chat, resume: true });
  const busy = status === 'submitted' || status === 'streaming';
  const live = useLiveVoice({
    chatId: `${chatId}-voice`,
    getToken: () => latest.current.token,
    getApp: () => latest.current.app,
  });

  // Keep the history for a reload: after each answer, and as the page goes away.
  useEffect(() => {
    if (status !== 'streaming') saveMessages(chatId, messages);
  }, [chatId, messages, status]);
  useEffect(() => {
    const save = () => saveMessages(chatId, chat.messages);
    window.addEventListener('pagehide', save);
    return () => window.removeEventListener('pagehide', save);
  }, [chat, chatId]);

  // An approved browser tool whose output was never sent (the page was reloaded): run it now.
  useEffect(() => {
    if (status === 'ready') pendingToolCalls(chat.messages).forEach(call => runTool(chat, call));
  }, [chat, status]);

  // Unmounted (new chat or transport): stop the request and close the socket.
  useEffect(
    () => () => {
      chat.stop();
      transport.close?.();
    },
    [chat, transport],
  );

  // A new token: the WebSocket reconnects with it, and the error of the refused request goes.
  const tokenSeen = useRef(token);
  useEffect(() => {
    if (tokenSeen.current === token) return;
    tokenSeen.current = token;
    transport.close?.();
    if (token && chat.status === 'error') chat.clearError();
  }, [token, chat, transport]);

  const stopping = useRef(Promise.resolve());
  const onStop = () => {
    if (transportKind === 'sse') stopping.current = stopRun(chatId, token).catch(() => undefined);
    stop();
  };
  const onSend = async text => {
    if (live.active) return live.sendText(text);
    await stopping.current; // the gateway has the stop before the next message
    return sendMessage({ text });
  };
  const input = useRef(null);
  const onAnswer = useCallback(
    (id, approved, reason) => {
      addToolApprovalResponse({ id, approved, ...(reason ? { reason } : {}) });
      input.current?.focus(); // the buttons are gone: the keyboard goes on from the message box
    },
    [addToolApprovalResponse],
  );
  // A long-running call's answer or a sign-in's end: the predicate then sends it (once).
  const onToolOutput = useCallback(
    options => {
      addToolOutput(options);
      input.current?.focus();
    },
    [addToolOutput],
  );

  // Follow the conversation while the reader is at the bottom.
  const log = useRef(null);
  const atBottom = useRef(true);
  useEffect(() => {
    if (atBottom.current && log.current) log.current.scrollTop = log.current.scrollHeight;
  }, [messages, live.messages]);

  const track = nowPlaying(messages);
  const shared = latestState([...messages, ...live.messages]);
  return (
    <main className="chat">
      <div className="statusbar">
        <p role="status" className={`status ${status}`} data-testid="status" data-status={status}>
          {STATUS_TEXT[status] ?? status}
        </p>
        <span className="muted" data-testid="chat-id">
          chat {chatId} · {transportKind === 'ws' ? 'WebSocket' : 'SSE'}
        </span>
        {track !== undefined && (
          <span className="now-playing" data-testid="now-playing">
            ♪ now playing track {String(track)}
          </span>
        )}
      </div>

      <section
        ref={log}
        className="log"
        role="log"
        aria-label="Conversation"
        tabIndex={0}
        onScroll={event => {
          const element = event.currentTarget;
          atBottom.current = element.scrollHeight - element.scrollTop - element.clientHeight < 80;
        }}
      >
        {messages.length === 0 && live.messages.length === 0 && (
          <p className="muted empty">Ask something, or try one of the commands below.</p>
        )}
        {messages.map((message, index) => (
          <Message
            key={message.id}
            message={message}
            onAnswer={onAnswer}
            onToolOutput={index === messages.length - 1 ? onToolOutput : undefined}
          />
        ))}
        {live.messages.map(message => (
          <Message key={message.id} message={message} onAnswer={live.answerApproval} answers={live.answers} live />
        ))}
      </section>

      {shared && <StatePanel state={shared} />}

      {error && (
        <div className="error" role="alert" data-testid="error">
          <p>Error: {error.message || 'the request failed'}</p>
          <button type="button" data-testid="retry" onClick={() => regenerate()}>
            Retry
          </button>
          <button type="button" onClick={clearError}>
            Dismiss
          </button>
        </div>
      )}

      <VoicePanel live={live} />
      <Composer
        ref={input}
        busy={busy && !live.active}
        locked={locked}
        onSend={onSend}
        onStop={onStop}
        live={live.active}
      />
    </main>
  );
}

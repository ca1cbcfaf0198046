import { Chat as ChatState, useChat } from '@ai-sdk/react';
import { getToolName, isToolUIPart } from 'ai';
import { useCallback, useEffect, useMemo, useRef, useState } from 'react';
import { useLiveVoice } from '../live/useLiveVoice.js';
import { latestState } from '../parts.js';
import { sendAutomaticallyWhen } from '../predicates.js';
import { suggestionsFor } from '../suggestions.js';
import { clearPending, saveMessages, savePending } from '../storage.js';
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
function createChat({ chatId, messages, transport, onError }) {
  const chat = new ChatState({
    id: chatId,
    messages,
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

const BUSY = new Set(['submitted', 'streaming']);

/**
 * One chat, continued from `initialMessages` (the gateway's copy, see OpenChat). `keepsChats`:
 * the gateway keeps the history (false: an older gateway, the tab keeps it and sends it whole).
 * `onStarted()` runs when the first request goes, `onTurnEnd()` when an answer ends. `appInfo`:
 * what the gateway says of the app (its model and tools), for the suggestions under the message box.
 */
export function Chat({
  chatId,
  initialMessages,
  transportKind,
  app,
  appInfo,
  token,
  locked,
  keepsChats = true,
  onUnauthorized,
  onNetworkError,
  onStarted,
  onTurnEnd,
}) {
  // Read by the transport on each request, so it always has the current token, app and callbacks.
  const latest = useRef({ token, app, keepsChats, onUnauthorized, onNetworkError, onStarted, onTurnEnd });
  useEffect(() => {
    latest.current = { token, app, keepsChats, onUnauthorized, onNetworkError, onStarted, onTurnEnd };
  });

  const [{ chat, transport }] = useState(() => {
    const transport = createTransport(transportKind, {
      getToken: () => latest.current.token,
      getApp: () => latest.current.app,
      onUnauthorized: () => latest.current.onUnauthorized(),
      // The gateway has the history: each request carries the last message only.
      lastMessageOnly: () => latest.current.keepsChats !== false,
    });
    const chat = createChat({
      chatId,
      messages: initialMessages,
      transport,
      onError: () => latest.current.onNetworkError(),
    });
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

  // A request went (the chat now is on the gateway), an answer ended (the list of chats changes).
  const previous = useRef(status);
  useEffect(() => {
    const before = previous.current;
    previous.current = status;
    if (before === status) return;
    if (status === 'submitted') latest.current.onStarted?.();
    if (BUSY.has(before) && !BUSY.has(status)) {
      if (latest.current.keepsChats !== false) clearPending(chatId);
      latest.current.onTurnEnd?.();
    }
  }, [chatId, status]);

  // The gateway keeps the history. What it has not recorded yet (it records a turn as it ends)
  // is kept as the page goes away during an answer: a reload shows the question it resumes.
  // An older gateway keeps nothing: then the tab keeps the whole history, as before.
  useEffect(() => {
    if (latest.current.keepsChats === false && status !== 'streaming') saveMessages(chatId, messages);
  }, [chatId, messages, status]);
  useEffect(() => {
    const save = () => {
      if (latest.current.keepsChats === false) saveMessages(chatId, chat.messages);
      else if (BUSY.has(chat.status)) savePending(chatId, chat.messages);
      else clearPending(chatId);
    };
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

  const suggestions = useMemo(() => suggestionsFor(appInfo), [appInfo]);
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
          <p className="muted empty">Ask something, or try one of the suggestions below.</p>
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
          <Message
            key={message.id}
            message={message}
            onAnswer={live.answerApproval}
            answers={live.answers}
            interrupted={live.interrupted[message.id]}
            live
          />
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
        suggestions={suggestions}
      />
    </main>
  );
}

import { readUIMessageStream } from 'ai';
import { useCallback, useEffect, useRef, useState } from 'react';
import { outputLevel } from '../audio.js';
import { browserTools, runBrowserTool } from '../tools.js';
import { liveSocketUrl } from '../transport.js';
import { openMicrophone } from './microphone.js';
import { PcmPlayer } from './pcm-player.js';

const REQUEST_ID = 'live';

function rms(buffer) {
  const pcm = new Int16Array(buffer);
  let sum = 0;
  for (const sample of pcm) sum += sample * sample;
  return pcm.length ? Math.sqrt(sum / pcm.length) / 32768 : 0;
}

/**
 * A voice conversation over the gateway's live extension (its own socket on /api/chat/ws):
 * `live-start`, then the microphone as binary PCM16 16 kHz frames, push-to-talk
 * (`live-activity-start`/`-end`) or hands-free (the gateway detects speech). Each model turn
 * comes back as one UI message (chunk frames); its `data-pcm` audio is played as it arrives.
 * Speaking, Interrupt, typing, or a turn that ends `interrupted` cuts the playback at once.
 */
export function useLiveVoice({ chatId, getToken, getApp = () => undefined }) {
  const [status, setStatus] = useState('off'); // off | connecting | on | closing
  const [handsFree, setHandsFree] = useState(false);
  const [talking, setTalking] = useState(false);
  const [messages, setMessages] = useState([]);
  const [answers, setAnswers] = useState({}); // approvalId -> the answer sent
  const [error, setError] = useState('');
  const session = useRef(null);

  const send = useCallback(frame => {
    const ws = session.current?.ws;
    if (ws?.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ requestId: REQUEST_ID, ...frame }));
  }, []);

  const start = useCallback(
    ({ handsFree }) => {
      if (session.current) return;
      setError('');
      setStatus('connecting');
      setHandsFree(handsFree);
      setTalking(false);
      // Made in the click that starts the session, so the browser lets it play.
      const player = new PcmPlayer();
      const ws = new WebSocket(liveSocketUrl(getToken()));
      ws.binaryType = 'arraybuffer';
      const s = {
        ws,
        player,
        handsFree,
        started: false,
        talking: false,
        micLevel: 0,
        closeMic: null,
        tools: new Map(), // toolCallId -> toolName
        approvals: new Map(), // approvalId -> toolCallId
        approved: new Set(), // toolCallIds the user allowed
        always: new Set(), // toolNames the user always allows
      };
      session.current = s;

      // One UI message stream for the session: every turn starts with a new messageId.
      let chunks;
      const stream = new ReadableStream({ start: controller => (chunks = controller) });
      (async () => {
        for await (const message of readUIMessageStream({ stream, onError: e => setError(e.message) })) {
          setMessages(list => {
            const index = list.findIndex(m => m.id === message.id);
            return index === -1 ? [...list, message] : list.with(index, message);
          });
        }
      })().catch(e => setError(e.message));

      // A browser tool runs once it needs no approval, was approved, or is always allowed; the
      // gateway announces an approved call again (`tool-input-available`) as the signal.
      const runTool = ({ toolName, toolCallId, input }) => {
        const allowed = !browserTools[toolName].needsApproval || s.approved.has(toolCallId) || s.always.has(toolName);
        if (!allowed) return; // its approval request follows
        runBrowserTool({ toolName, toolCallId, input }, ({ output, errorText }) =>
          send({ type: 'live-tool-output', toolCallId, ...(errorText == null ? { output } : { errorText }) }),
        );
      };

      const onChunk = chunk => {
        if (chunk.type === 'data-pcm') return player.play(chunk.data);
        if (chunk.type === 'tool-input-start') s.tools.set(chunk.toolCallId, chunk.toolName);
        if (chunk.type === 'tool-approval-request') s.approvals.set(chunk.approvalId, chunk.toolCallId);
        if (chunk.type === 'tool-input-available' && !chunk.providerExecuted && browserTools[chunk.toolName]) {
          runTool(chunk);
        }
        if (chunk.type === 'finish' && chunk.finishReason === 'interrupted') player.stop();
        chunks.enqueue(chunk);
      };

      const onFrame = async frame => {
        if (frame.requestId !== REQUEST_ID) return;
        if (frame.type === 'start') {
          s.started = true;
          setStatus('on');
          try {
            s.closeMic = await openMicrophone(pcm => {
              s.micLevel = rms(pcm);
              if ((s.handsFree || s.talking) && ws.readyState === WebSocket.OPEN) ws.send(pcm);
            });
            if (ws.readyState !== WebSocket.OPEN) s.closeMic(); // ended while the microphone opened
          } catch (e) {
            setError(`Microphone unavailable (${e.message}); you can still type.`);
          }
        } else if (frame.type === 'chunk') {
          onChunk(frame.chunk);
        } else if (frame.type === 'error') {
          setError(frame.errorText ?? 'The voice session failed.');
          if (!s.started) ws.close(); // live-start refused (chat_busy, overloaded, …)
        } else if (frame.type === 'end') {
          ws.close();
        }
      };

      ws.onopen = () =>
        send({
          type: 'live-start',
          id: chatId,
          ...(getApp() ? { app: getApp() } : {}),
          sampleRate: 16000,
          handsFree,
          headers: { 'x-ai-sdk-major': '7' },
        });
      ws.onmessage = event => typeof event.data === 'string' && onFrame(JSON.parse(event.data));
      ws.onclose = event => {
        s.closeMic?.();
        player.stop();
        chunks.close();
        if (session.current === s) session.current = null;
        if (event.code !== 1000 && event.code !== 1005) setError(`The voice connection closed (${event.code}).`);
        setStatus('off');
        setTalking(false);
      };
    },
    [chatId, getToken, getApp, send],
  );

  const stop = useCallback(() => {
    const s = session.current;
    if (s == null) return;
    s.closeMic?.();
    s.closeMic = null;
    s.player.stop();
    setStatus('closing');
    if (s.ws.readyState === WebSocket.OPEN) send({ type: 'live-stop' });
    else s.ws.close();
  }, [send]);

  /** Push-to-talk: the user starts speaking (a barge-in if the model is talking). */
  const pressTalk = useCallback(() => {
    const s = session.current;
    if (s == null || s.handsFree || s.talking) return;
    s.player.stop();
    s.talking = true;
    setTalking(true);
    send({ type: 'live-activity-start' });
  }, [send]);

  const releaseTalk = useCallback(() => {
    const s = session.current;
    if (s == null || !s.talking) return;
    s.talking = false;
    setTalking(false);
    send({ type: 'live-activity-end' });
  }, [send]);

  const interrupt = useCallback(() => {
    session.current?.player.stop();
    send({ type: 'live-interrupt' });
  }, [send]);

  const sendText = useCallback(
    text => {
      session.current?.player.stop();
      send({ type: 'live-text', text });
    },
    [send],
  );

  const answerApproval = useCallback(
    (approvalId, approved, reason) => {
      const s = session.current;
      if (s == null) return;
      const toolCallId = s.approvals.get(approvalId);
      if (approved && toolCallId) s.approved.add(toolCallId);
      if (approved && reason === 'always' && s.tools.has(toolCallId)) s.always.add(s.tools.get(toolCallId));
      setAnswers(current => ({ ...current, [approvalId]: { approved, reason } }));
      send({ type: 'live-approval', approvalId, approved, ...(reason ? { reason } : {}) });
    },
    [send],
  );

  /** Levels for meters: microphone and output (RMS 0..1), output pitch, audio still queued. */
  const meters = useCallback(() => {
    const s = session.current;
    return { mic: s?.micLevel ?? 0, ...outputLevel(), queuedMs: Math.round((s?.player.queued ?? 0) * 1000) };
  }, []);

  // Leaving the page (or this chat) ends the session.
  useEffect(() => () => session.current?.ws.close(), []);

  return {
    status,
    active: status === 'on',
    handsFree,
    talking,
    messages,
    answers,
    error,
    start,
    stop,
    pressTalk,
    releaseTalk,
    interrupt,
    sendText,
    answerApproval,
    meters,
  };
}

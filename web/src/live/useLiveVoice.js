import { readUIMessageStream } from 'ai';
import { useCallback, useEffect, useRef, useState } from 'react';
import { outputLevel } from '../audio.js';
import { browserTools, runBrowserTool } from '../tools.js';
import { liveSocketUrl } from '../transport.js';
import { openMicrophone } from './microphone.js';
import { PcmPlayer } from './pcm-player.js';
import { rms, VoiceCheck } from './voice-check.js';

const REQUEST_ID = 'live';
/** How long the microphone may take to deliver its first frame once it is open. */
const MIC_FIRST_FRAME_MS = 5000;
const NO_AUDIO = 'The microphone delivers no audio; you can still type.';

/**
 * A voice conversation over the gateway's live extension (its own socket on /api/chat/ws):
 * `live-start`, then the microphone as binary PCM16 16 kHz frames, push-to-talk
 * (`live-activity-start`/`-end`) or hands-free (the gateway detects speech). Each model turn
 * comes back as one UI message (chunk frames); its `data-pcm` audio is played as it arrives.
 * Speaking, Interrupt, typing, or a turn that ends `interrupted` cuts the playback at once, and
 * the rest of that turn's audio is not played. In hands-free mode the page hears the user speak
 * over an answer itself (`VoiceCheck`), stops the answer and sends `live-interrupt`: the model
 * sends faster than the page plays, so the gateway has usually sent the whole answer already.
 * An answer whose audio was cut, or that the gateway ended `interrupted`, is listed in
 * `interrupted` (messageId -> 'cut' | 'ended') so that the transcript can say so.
 *
 * `status` is `on` only once the microphone delivers audio (its first frame), so that nothing
 * said after the panel shows "on" is lost; if it cannot, the session goes on for typing and `mic`
 * says `failed`.
 */
export function useLiveVoice({ chatId, getToken, getApp = () => undefined }) {
  const [status, setStatus] = useState('off'); // off | connecting | on | closing
  const [mic, setMic] = useState('off'); // off | opening | on | failed
  const [handsFree, setHandsFree] = useState(false);
  const [talking, setTalking] = useState(false);
  const [messages, setMessages] = useState([]);
  const [answers, setAnswers] = useState({}); // approvalId -> the answer sent
  const [error, setError] = useState('');
  const [interrupted, setInterrupted] = useState({}); // messageId -> 'cut' | 'ended'
  const session = useRef(null);

  const markInterrupted = useCallback((ids, how) => {
    if (ids.size === 0) return;
    setInterrupted(current => {
      const next = { ...current };
      for (const id of ids) if (next[id] !== 'cut') next[id] = how;
      return next;
    });
  }, []);

  /** Stops the answer playing now; the rest of that turn's audio, still on its way, is dropped. */
  const cut = useCallback(
    s => {
      s.muted = s.turnId;
      markInterrupted(s.player.stop(), 'cut');
    },
    [markInterrupted],
  );

  const send = useCallback(frame => {
    const ws = session.current?.ws;
    if (ws?.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ requestId: REQUEST_ID, ...frame }));
  }, []);

  const start = useCallback(
    ({ handsFree }) => {
      if (session.current) return;
      setError('');
      setStatus('connecting');
      setMic('off');
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
        mic: 'off', // off | opening | on | failed
        micTimer: 0,
        closeMic: null,
        voice: new VoiceCheck(),
        turnId: null, // the messageId of the turn in progress (or the last one)
        muted: null, // a turn whose audio is not played any more (cut)
        closing: false,
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
        if (chunk.type === 'data-pcm') {
          if (s.muted == null || s.muted !== s.turnId) player.play(chunk.data, s.turnId);
          return;
        }
        if (chunk.type === 'start') s.turnId = chunk.messageId ?? s.turnId;
        if (chunk.type === 'tool-input-start') s.tools.set(chunk.toolCallId, chunk.toolName);
        if (chunk.type === 'tool-approval-request') s.approvals.set(chunk.approvalId, chunk.toolCallId);
        if (chunk.type === 'tool-input-available' && !chunk.providerExecuted && browserTools[chunk.toolName]) {
          runTool(chunk);
        }
        if (chunk.type === 'finish' && chunk.finishReason === 'interrupted') {
          cut(s);
          if (s.turnId != null) markInterrupted(new Set([s.turnId]), 'ended');
        }
        try {
          chunks.enqueue(chunk);
        } catch {
          // The reader stopped at a chunk it could not take, and has reported it (onError).
        }
      };

      // The session is "on" once the gateway has started it and the microphone delivers audio
      // (or has failed: then it is on for typing).
      const update = () => {
        setMic(s.mic);
        if (s.started && s.mic !== 'opening' && !s.closing && session.current === s) setStatus('on');
      };

      const onPcm = pcm => {
        if (s.mic !== 'on') {
          clearTimeout(s.micTimer);
          s.mic = 'on';
          setError(current => (current === NO_AUDIO ? '' : current));
          update();
        }
        const level = rms(pcm);
        s.micLevel = level;
        // Hands-free barge-in: the user speaks over the answer that plays.
        if (s.voice.feed(level) && s.handsFree && player.playing) {
          cut(s);
          send({ type: 'live-interrupt' });
        }
        if ((s.handsFree || s.talking) && ws.readyState === WebSocket.OPEN) ws.send(pcm);
      };

      const onFrame = async frame => {
        if (frame.requestId !== REQUEST_ID) return;
        if (frame.type === 'start') {
          s.started = true;
          s.mic = 'opening';
          update();
          try {
            const close = await openMicrophone(onPcm);
            s.closeMic = () => {
              clearTimeout(s.micTimer);
              close();
            };
            if (ws.readyState !== WebSocket.OPEN || s.closing) {
              s.closeMic(); // ended while the microphone opened
              return;
            }
            if (s.mic === 'opening') {
              s.micTimer = setTimeout(() => {
                if (s.mic !== 'opening') return;
                s.mic = 'failed';
                setError(NO_AUDIO);
                update();
              }, MIC_FIRST_FRAME_MS);
            }
          } catch (e) {
            s.mic = 'failed';
            setError(`Microphone unavailable (${e.message}); you can still type.`);
            update();
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
        clearTimeout(s.micTimer);
        player.stop();
        chunks.close();
        if (session.current === s) session.current = null;
        if (event.code !== 1000 && event.code !== 1005) setError(`The voice connection closed (${event.code}).`);
        setStatus('off');
        setMic('off');
        setTalking(false);
      };
    },
    [chatId, getToken, getApp, send, cut, markInterrupted],
  );

  const stop = useCallback(() => {
    const s = session.current;
    if (s == null) return;
    s.closing = true;
    s.closeMic?.();
    s.closeMic = null;
    cut(s);
    setStatus('closing');
    if (s.ws.readyState === WebSocket.OPEN) send({ type: 'live-stop' });
    else s.ws.close();
  }, [send, cut]);

  /** Push-to-talk: the user starts speaking (a barge-in if the model is talking). */
  const pressTalk = useCallback(() => {
    const s = session.current;
    if (s == null || s.handsFree || s.talking || s.mic !== 'on') return;
    cut(s);
    s.talking = true;
    setTalking(true);
    send({ type: 'live-activity-start' });
  }, [send, cut]);

  const releaseTalk = useCallback(() => {
    const s = session.current;
    if (s == null || !s.talking) return;
    s.talking = false;
    setTalking(false);
    send({ type: 'live-activity-end' });
  }, [send]);

  const interrupt = useCallback(() => {
    if (session.current) cut(session.current);
    send({ type: 'live-interrupt' });
  }, [send, cut]);

  const sendText = useCallback(
    text => {
      if (session.current) cut(session.current);
      send({ type: 'live-text', text });
    },
    [send, cut],
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
    mic,
    handsFree,
    talking,
    messages,
    answers,
    interrupted,
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

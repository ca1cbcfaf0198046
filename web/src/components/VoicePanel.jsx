import { useEffect, useRef, useState } from 'react';

const STATUS_TEXT = { off: 'Voice is off', connecting: 'Connecting…', on: 'Voice is on', closing: 'Ending…' };

/** Microphone and speaker levels, refreshed every frame without re-rendering React. */
function Meters({ meters }) {
  const mic = useRef(null);
  const speaker = useRef(null);
  useEffect(() => {
    let frame;
    const draw = () => {
      const m = meters();
      mic.current.value = Math.min(1, m.mic * 4);
      mic.current.dataset.level = m.mic.toFixed(4);
      speaker.current.value = Math.min(1, m.level * 4);
      // Also as data attributes: what the page plays, for tests and curious readers.
      Object.assign(speaker.current.dataset, {
        level: m.level.toFixed(4),
        peakHz: Math.round(m.peakHz),
        queuedMs: m.queuedMs,
      });
      frame = requestAnimationFrame(draw);
    };
    draw();
    return () => cancelAnimationFrame(frame);
  }, [meters]);
  return (
    <div className="meters">
      <label>
        <span>Microphone</span>
        <meter ref={mic} data-testid="mic-level" min={0} max={1} value={0} />
      </label>
      <label>
        <span>Speaker</span>
        <meter ref={speaker} data-testid="speaker-level" min={0} max={1} value={0} />
      </label>
    </div>
  );
}

/**
 * Hold to talk, with the pointer or with Space / Enter when it has the focus. Enabled once the
 * microphone delivers audio: what is said from then on reaches the gateway.
 */
function TalkButton({ live }) {
  const hold = event => {
    if (event.type === 'keydown' && (event.repeat || (event.key !== ' ' && event.key !== 'Enter'))) return;
    event.preventDefault();
    live.pressTalk();
  };
  const release = event => {
    if (event.type === 'keyup' && event.key !== ' ' && event.key !== 'Enter') return;
    live.releaseTalk();
  };
  return (
    <button
      type="button"
      className={live.talking ? 'talk talking' : 'talk'}
      data-testid="talk"
      aria-pressed={live.talking}
      disabled={!(live.active && live.mic === 'on')}
      onPointerDown={hold}
      onPointerUp={release}
      onPointerCancel={release}
      onPointerLeave={release}
      onKeyDown={hold}
      onKeyUp={release}
      onBlur={live.releaseTalk}
      onContextMenu={event => event.preventDefault()}
    >
      Hold to talk
    </button>
  );
}

/** The live voice controls: push-to-talk or hands-free, interrupt, end. */
export function VoicePanel({ live }) {
  const [handsFree, setHandsFree] = useState(false);
  return (
    <section className="voice" aria-labelledby="voice-title" data-testid="voice" data-status={live.status}>
      <h2 id="voice-title">Voice</h2>
      {live.status === 'off' ? (
        <div className="row">
          <label className="check">
            <input
              type="checkbox"
              data-testid="hands-free"
              checked={handsFree}
              onChange={event => setHandsFree(event.target.checked)}
            />
            Hands-free
          </label>
          <button type="button" data-testid="voice-start" onClick={() => live.start({ handsFree })}>
            Start voice
          </button>
        </div>
      ) : (
        <div className="row">
          {!live.handsFree && <TalkButton live={live} />}
          <button type="button" data-testid="interrupt" onClick={live.interrupt} disabled={!live.active}>
            Interrupt
          </button>
          <button type="button" data-testid="voice-stop" onClick={live.stop}>
            End voice
          </button>
        </div>
      )}
      {live.status !== 'off' && <Meters meters={live.meters} />}
      <p className="muted" role="status" data-testid="voice-status" data-mic={live.mic}>
        {live.status === 'connecting' && live.mic === 'opening' ? 'Opening the microphone…' : STATUS_TEXT[live.status]}
        {live.status === 'off' && ': talk to the agent (WebSocket live mode).'}
        {live.active && live.mic !== 'on' && ' without the microphone: type to the conversation.'}
        {live.active && live.mic === 'on' && live.talking && ': listening… release to send.'}
        {live.active && live.mic === 'on' && !live.talking &&
          (live.handsFree ? ': speak any time (speaking over the answer stops it).' : ': hold the button (or Space) while you speak.')}
      </p>
      {live.error && (
        <p className="problem" role="alert" data-testid="voice-error">
          {live.error}
        </p>
      )}
    </section>
  );
}

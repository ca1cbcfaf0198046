import { useEffect, useRef, useState } from 'react';
import { gatewayUrl } from '../gateway.js';
import { hostOf, SIGN_IN_TOOL } from '../parts.js';

const MESSAGE_TYPE = 'adk-gateway:oauth';
const CHANNEL = 'adk-gateway-oauth';
const NOT_COMPLETED = 'Sign-in was not completed.';

/**
 * Calls `onResult(ok)` once when the gateway's sign-in callback (in the popup) reports the end of
 * sign-in `toolCallId`: a `postMessage` to this window (from the gateway's origin, or the popup
 * itself) or the same message on the BroadcastChannel. Listens only while `toolCallId` is set.
 */
function useSignInResult(toolCallId, popup, onResult) {
  const latest = useRef(onResult);
  useEffect(() => {
    latest.current = onResult;
  });
  useEffect(() => {
    if (!toolCallId) return undefined;
    let done = false;
    const gatewayOrigin = new URL(gatewayUrl('/')).origin;
    const receive = (data, trusted) => {
      if (done || !trusted || data?.type !== MESSAGE_TYPE || data.toolCallId !== toolCallId) return;
      done = true;
      latest.current(data.ok === true);
    };
    const onMessage = event =>
      receive(event.data, event.origin === gatewayOrigin || (popup.current != null && event.source === popup.current));
    window.addEventListener('message', onMessage);
    const channel = typeof BroadcastChannel === 'function' ? new BroadcastChannel(CHANNEL) : null;
    if (channel) channel.onmessage = event => receive(event.data, true); // same origin only
    return () => {
      done = true;
      window.removeEventListener('message', onMessage);
      channel?.close();
    };
  }, [toolCallId, popup]);
}

/**
 * A tool that needs the user's sign-in (ADK `adk_request_credential`): "Sign in" opens the
 * provider's page in a popup; when the gateway's callback reports the end, `onOutput` answers the
 * call (`{signedIn: true}`, or an error), and the chat goes on by itself.
 */
export function ToolSignIn({ part, toolName, onOutput }) {
  const [opened, setOpened] = useState(false);
  const [blocked, setBlocked] = useState(false);
  const popup = useRef(null);
  const waiting = part.state === 'input-available';
  const authUri = part.input?.authUri;
  const { toolCallId } = part;
  const headingId = `tool-${toolCallId}`;

  const answer = ok =>
    onOutput(
      ok
        ? { tool: SIGN_IN_TOOL, toolCallId, output: { signedIn: true } }
        : { tool: SIGN_IN_TOOL, toolCallId, state: 'output-error', errorText: NOT_COMPLETED },
    );
  useSignInResult(waiting && onOutput ? toolCallId : null, popup, answer);

  const open = () => {
    popup.current = window.open(authUri, 'adk-sign-in', 'popup,width=600,height=700');
    setBlocked(popup.current == null);
    setOpened(true);
  };

  return (
    <section
      className={`tool sign-in-request state-${part.state}`}
      data-testid="tool-part"
      data-tool-name={SIGN_IN_TOOL}
      data-state={part.state}
      aria-labelledby={headingId}
    >
      <header>
        <span id={headingId} className="tool-name">
          Sign-in{toolName ? ` for ${toolName}` : ''}
        </span>
        {authUri && <span className="badge">{hostOf(authUri)}</span>}
      </header>
      {waiting && (
        <>
          <p className="waiting">
            {toolName ? <code>{toolName}</code> : 'A tool'} needs you to sign in
            {authUri ? ` at ${hostOf(authUri)}` : ''}.
          </p>
          {onOutput && authUri && (
            <div className="answers" role="group" aria-label="Sign in">
              <button type="button" className="allow" data-testid="sign-in" onClick={open}>
                Sign in
              </button>
              <button type="button" className="deny" data-testid="sign-in-cancel" onClick={() => answer(false)}>
                Cancel
              </button>
            </div>
          )}
          {opened && !blocked && (
            <p className="muted" data-testid="sign-in-opened">
              Finish signing in in the window that opened.
            </p>
          )}
          {blocked && (
            <p className="problem" data-testid="sign-in-blocked">
              The browser blocked the sign-in window:{' '}
              <a href={authUri} target="_blank" rel="opener">
                open it in a new tab
              </a>
              .
            </p>
          )}
        </>
      )}
      {part.state === 'output-available' && (
        <p className="decision" data-testid="sign-in-done">
          Signed in
        </p>
      )}
      {part.state === 'output-error' && (
        <p className="problem" data-testid="tool-error">
          {part.errorText}
        </p>
      )}
    </section>
  );
}

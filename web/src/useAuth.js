import { useCallback, useEffect, useState } from 'react';
import { gatewayUrl } from './gateway.js';

const TOKEN_KEY = 'adk-gateway-token';

function storedToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || '';
  } catch {
    return '';
  }
}

function storeToken(token) {
  try {
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    // Storage may be unavailable (privacy modes): the token then lasts as long as the page.
  }
}

/** GET /api/me: `{ok, user, auth}`, `{unauthorized, message}`, or `{}` when it cannot say. */
async function whoAmI(token) {
  try {
    const response = await fetch(gatewayUrl('/api/me'), {
      headers: token ? { Authorization: `Bearer ${token}` } : {},
      cache: 'no-store',
    });
    if (response.status === 401) {
      const body = await response.json().catch(() => null);
      return { unauthorized: true, message: body?.error?.message ?? 'unauthorized' };
    }
    if (!response.ok) return {};
    const me = await response.json();
    return { ok: true, user: String(me.user ?? ''), auth: String(me.auth ?? '') };
  } catch {
    return {};
  }
}

/**
 * Who the page is signed in as. The gateway answers GET /api/me with 401 when it needs a token
 * (`--auth jwt` or `api-keys`); the page then asks for one and keeps it in sessionStorage.
 *
 * phase: 'checking' (first look), 'needs-token' (show the form), 'signed-in'.
 * `token` is '' without one; `tokenRefused` and `recheck` are for the chat's failed requests.
 */
export function useAuth() {
  const [token, setToken] = useState(storedToken);
  // started: signed in at least once (the chat then stays on the page while a token is asked for again)
  const [auth, setAuth] = useState({ phase: 'checking', user: '', mode: '', problem: '', busy: false, started: false });

  const accept = useCallback((candidate, me) => {
    storeToken(candidate);
    setToken(candidate);
    setAuth({ phase: 'signed-in', user: me.user ?? '', mode: me.auth ?? '', problem: '', busy: false, started: true });
  }, []);

  const refuse = useCallback(problem => {
    storeToken('');
    setToken('');
    setAuth(current => ({ ...current, phase: 'needs-token', user: '', problem, busy: false }));
  }, []);

  // On load: does the stored token (or no token) get in?
  useEffect(() => {
    let cancelled = false;
    const token = storedToken();
    whoAmI(token).then(me => {
      if (cancelled) return;
      if (me.unauthorized) refuse(token ? `Token refused: ${me.message}` : '');
      else accept(token, me);
    });
    return () => {
      cancelled = true;
    };
  }, [accept, refuse]);

  /** The token form's answer. */
  const signIn = useCallback(
    async candidate => {
      setAuth(current => ({ ...current, busy: true }));
      const me = await whoAmI(candidate);
      if (me.unauthorized) refuse(`Token refused: ${me.message}`);
      else accept(candidate, me);
    },
    [accept, refuse],
  );

  /** A chat request was answered 401 (the token expired or was revoked): ask again. */
  const tokenRefused = useCallback(
    () => refuse('The gateway refused the token (it may have expired): enter it again.'),
    [refuse],
  );

  /** After a failed WebSocket (a refused handshake looks like a network error): is the token still good? */
  const recheck = useCallback(async () => {
    if (!token || !auth.mode || auth.mode === 'none') return; // no token: the form is showing already
    const me = await whoAmI(token);
    if (me.unauthorized) tokenRefused();
  }, [auth.mode, token, tokenRefused]);

  return { ...auth, token, signIn, tokenRefused, recheck };
}

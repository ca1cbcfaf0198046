import { useCallback, useEffect, useRef, useState } from 'react';
import { deleteChat, listChats, renameChat } from './chats.js';

/**
 * The chats the sidebar lists. A voice conversation runs in a session of its own, named after its
 * chat (`<chat id>-voice`, see Chat.jsx): the gateway lists it, but it is part of that chat, not
 * one to open with `useChat`.
 */
function shown(chats) {
  return (Array.isArray(chats) ? chats : []).filter(chat => chat && typeof chat.id === 'string' && !chat.id.endsWith('-voice'));
}

/**
 * The user's chats for the sidebar (GET /api/chats, of `app` when the page picks one, else of
 * every app), newest first, once the page may ask (`ready`: signed in).
 *
 * Returns `{supported, chats, nextCursor, loading, error, refresh, loadMore, rename, remove,
 * unsupported}`. `supported`: null until the gateway answered, false when it has no chats API
 * (an older gateway: the page then keeps history itself and sends it whole). `refresh()` reloads
 * the first page (after each turn, and when the tab is shown again: another device may have
 * gone on). `rename` and `remove` throw a `ChatsError` when the gateway refuses.
 */
export function useChats({ ready, token, app, onUnauthorized }) {
  const [state, setState] = useState({ supported: null, chats: [], nextCursor: undefined, loading: false, error: '' });
  const latest = useRef({ ready, token, app, onUnauthorized });
  latest.current = { ready, token, app, onUnauthorized };
  const generation = useRef(0); // answers to an older request (another app, an earlier refresh) are dropped

  const failed = useCallback(error => {
    if (error.status === 401) latest.current.onUnauthorized?.();
    if (error.unsupported) setState(current => ({ ...current, supported: false, chats: [], loading: false, error: '' }));
    else setState(current => ({ ...current, loading: false, error: error.message }));
  }, []);

  const refresh = useCallback(async () => {
    const { ready, token, app } = latest.current;
    if (!ready) return;
    const mine = ++generation.current;
    setState(current => ({ ...current, loading: true }));
    try {
      const page = await listChats({ token, app });
      if (mine !== generation.current) return;
      const chats = shown(page?.chats);
      setState({ supported: true, chats, nextCursor: page?.nextCursor, loading: false, error: '' });
    } catch (error) {
      if (mine === generation.current) failed(error);
    }
  }, [failed]);

  const loadMore = useCallback(async () => {
    const { token, app } = latest.current;
    const cursor = state.nextCursor;
    if (!cursor) return;
    const mine = ++generation.current;
    setState(current => ({ ...current, loading: true }));
    try {
      const page = await listChats({ token, app, cursor });
      if (mine !== generation.current) return;
      setState(current => {
        const known = new Set(current.chats.map(chat => `${chat.app}/${chat.id}`));
        const more = shown(page?.chats).filter(chat => !known.has(`${chat.app}/${chat.id}`));
        return { ...current, chats: [...current.chats, ...more], nextCursor: page?.nextCursor, loading: false, error: '' };
      });
    } catch (error) {
      if (mine === generation.current) failed(error);
    }
  }, [failed, state.nextCursor]);

  const rename = useCallback(
    async (chat, title) => {
      const summary = await renameChat({ token: latest.current.token, id: chat.id, app: chat.app, title });
      setState(current => ({
        ...current,
        chats: current.chats.map(item => (item.id === chat.id && item.app === chat.app ? { ...item, ...summary } : item)),
      }));
      return summary;
    },
    [],
  );

  const remove = useCallback(async chat => {
    await deleteChat({ token: latest.current.token, id: chat.id, app: chat.app });
    setState(current => ({
      ...current,
      chats: current.chats.filter(item => !(item.id === chat.id && item.app === chat.app)),
    }));
  }, []);

  /** The chat's own load found no chats API: the same as the list finding none. */
  const unsupported = useCallback(() => setState(current => ({ ...current, supported: false, chats: [] })), []);

  // The first page: on sign-in, with a new token, for another app.
  useEffect(() => {
    if (ready) refresh();
  }, [ready, token, app, refresh]);

  // Back to the tab: another device may have gone on with a chat.
  useEffect(() => {
    const shown = () => {
      if (document.visibilityState === 'visible') refresh();
    };
    document.addEventListener('visibilitychange', shown);
    return () => document.removeEventListener('visibilitychange', shown);
  }, [refresh]);

  return { ...state, refresh, loadMore, rename, remove, unsupported };
}

import { useEffect, useState } from 'react';
import { gatewayUrl } from './gateway.js';

/**
 * The apps the gateway serves (GET /api/apps), once the page may ask (`ready`: signed in):
 * `{names, defaultApp}`, or null until known (and when the gateway cannot say).
 */
export function useApps(ready, token) {
  const [apps, setApps] = useState(null);
  useEffect(() => {
    if (!ready || apps) return undefined;
    let cancelled = false;
    fetch(gatewayUrl('/api/apps'), { headers: token ? { Authorization: `Bearer ${token}` } : {}, cache: 'no-store' })
      .then(response => (response.ok ? response.json() : null))
      .then(body => {
        const list = Array.isArray(body?.apps) ? body.apps : [];
        if (cancelled || list.length === 0) return;
        const names = list.map(app => String(app.name));
        setApps({ names, defaultApp: String((list.find(app => app.default) ?? list[0]).name) });
      })
      .catch(() => undefined); // an older gateway, or offline: the default app answers
    return () => {
      cancelled = true;
    };
  }, [ready, token, apps]);
  return apps;
}

/** The app the chat talks to: the chosen one if the gateway serves it, else its default; none with one app. */
export function appToUse(apps, chosen) {
  if (apps == null) return chosen || undefined; // not known yet: what the URL says
  if (apps.names.length < 2) return undefined;
  return apps.names.includes(chosen) ? chosen : apps.defaultApp;
}

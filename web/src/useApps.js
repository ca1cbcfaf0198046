import { useEffect, useState } from 'react';
import { gatewayUrl } from './gateway.js';

/** One tool as `GET /api/apps` lists it; `parameters` (its arguments' JSON Schema) is undefined when not given. */
function toolOf(raw) {
  return {
    name: raw.name,
    description: typeof raw.description === 'string' ? raw.description : '',
    needsApproval: raw.needsApproval === true,
    runsInBrowser: raw.runsInBrowser === true,
    longRunning: raw.longRunning === true,
    parameters: raw.parameters && typeof raw.parameters === 'object' ? raw.parameters : undefined,
  };
}

/**
 * One app as `GET /api/apps` lists it: `{name, model, tools}`. `model`: the name of its model
 * (undefined when the gateway does not say); `tools`: null when the gateway does not list them.
 */
function appOf(raw) {
  return {
    name: String(raw.name),
    model: typeof raw.model === 'string' ? raw.model : undefined,
    tools: Array.isArray(raw.tools)
      ? raw.tools.filter(tool => tool && typeof tool.name === 'string' && tool.name).map(toolOf)
      : null,
  };
}

/**
 * The apps the gateway serves (GET /api/apps), once the page may ask (`ready`: signed in):
 * `{names, defaultApp, byName}` (`byName[name]`: `{name, model, tools}`); undefined until known,
 * null when the gateway cannot say (an older gateway, or offline: asked again with a new token).
 */
export function useApps(ready, token) {
  const [apps, setApps] = useState(undefined);
  const [failedWith, setFailedWith] = useState(undefined); // the token the gateway could not say with
  const key = token ?? '';
  useEffect(() => {
    if (!ready || apps || failedWith === key) return undefined;
    let cancelled = false;
    const cannotSay = () => {
      if (!cancelled) setFailedWith(key); // the default app answers
    };
    fetch(gatewayUrl('/api/apps'), { headers: token ? { Authorization: `Bearer ${token}` } : {}, cache: 'no-store' })
      .then(response => (response.ok ? response.json() : null))
      .then(body => {
        if (cancelled) return;
        const listed = (Array.isArray(body?.apps) ? body.apps : []).filter(app => app && app.name != null);
        if (listed.length === 0) return cannotSay();
        const list = listed.map(appOf);
        const chosen = listed.find(app => app.default);
        return setApps({
          names: list.map(app => app.name),
          defaultApp: chosen ? String(chosen.name) : list[0].name,
          byName: Object.fromEntries(list.map(app => [app.name, app])),
        });
      })
      .catch(cannotSay); // an older gateway, or offline
    return () => {
      cancelled = true;
    };
  }, [ready, token, key, apps, failedWith]);
  if (apps) return apps;
  return ready && failedWith === key ? null : undefined;
}

/** The app the chat talks to: the chosen one if the gateway serves it, else its default; none with one app. */
export function appToUse(apps, chosen) {
  if (apps == null) return chosen || undefined; // not known: what the URL says
  if (apps.names.length < 2) return undefined;
  return apps.names.includes(chosen) ? chosen : apps.defaultApp;
}

/**
 * What the page knows of the app the chat talks to (`app`: from `appToUse`): its entry, undefined
 * while the apps are not known yet, null when the gateway cannot say.
 */
export function appInfoOf(apps, app) {
  if (apps == null) return apps;
  return apps.byName[app ?? apps.defaultApp] ?? null;
}

/**
 * Where the gateway is. The page's own origin by default (the gateway serves it at `/`). A copy
 * of the built page served from elsewhere (a static host, a CDN) names the gateway in its
 * index.html instead:
 *
 *   <meta name="adk-gateway-url" content="https://chat-gateway.example.com" />
 *
 * and the gateway then needs that page's origin in `--allowed-origins`. The URL comes from the page
 * itself, never from the address bar, so a link cannot send the page's token elsewhere.
 */
function gatewayBase() {
  const named = document.querySelector('meta[name="adk-gateway-url"]')?.getAttribute('content')?.trim();
  return named ? new URL(named, window.location.href).href : window.location.href;
}

/** The gateway's URL for `path` (e.g. `/api/chat`). */
export function gatewayUrl(path) {
  return new URL(path, gatewayBase()).href;
}

/** The same as a WebSocket URL (http(s) becomes ws(s)). */
export function gatewaySocketUrl(path) {
  const url = new URL(path, gatewayBase());
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  return url;
}

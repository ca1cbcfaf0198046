import { hostOf } from '../parts.js';

/**
 * Google's Search suggestions (a grounded answer's `data-search-suggestions`), which must be shown
 * with it: their HTML in a sandboxed frame. No scripts, no same origin: the frame can only show
 * itself and open its links (`<base target="_blank">`) in a new tab.
 */
function SearchSuggestions({ html }) {
  const doc = `<!doctype html><html><head><meta charset="utf-8"><base target="_blank"></head><body style="margin:0">${html}</body></html>`;
  return (
    <iframe
      className="search-suggestions"
      data-testid="search-suggestions"
      title="Google Search suggestions"
      sandbox="allow-popups allow-popups-to-escape-sandbox"
      referrerPolicy="no-referrer"
      srcDoc={doc}
    />
  );
}

function Source({ part }) {
  if (part.type === 'source-url') {
    return (
      <li data-testid="source-url">
        <a href={part.url} target="_blank" rel="noreferrer noopener">
          {part.title || hostOf(part.url)}
        </a>{' '}
        <span className="muted">{hostOf(part.url)}</span>
      </li>
    );
  }
  return (
    <li data-testid="source-document">
      <span className="document-name">{part.title ?? part.filename ?? 'document'}</span>{' '}
      <span className="muted">document</span>
    </li>
  );
}

/** A grounded answer's sources (web pages and documents) and its search suggestions, under it. */
export function Sources({ id, sources, suggestions }) {
  return (
    <div className="sources" data-testid="sources">
      {sources.length > 0 && (
        <>
          <p className="sources-title" id={`${id}-sources`}>
            Sources
          </p>
          <ul aria-labelledby={`${id}-sources`}>
            {sources.map(part => (
              <Source key={part.sourceId ?? part.url ?? part.title} part={part} />
            ))}
          </ul>
        </>
      )}
      {suggestions.map(html => (
        <SearchSuggestions key={html} html={html} />
      ))}
    </div>
  );
}

import { fileNameOf } from '../parts.js';

/** A file from the assistant (an ADK artifact: a signed link on the gateway): images inline, others to download. */
export function FilePart({ part }) {
  const name = fileNameOf(part);
  if (part.mediaType?.startsWith('image/')) {
    return <img className="image" data-testid="image" src={part.url} alt={name ?? 'image from the assistant'} />;
  }
  return (
    <p className="file">
      <a href={part.url} download={name ?? true} data-testid="file-link">
        {name ?? 'file'}
      </a>{' '}
      <span className="muted" data-testid="file-type">
        {part.mediaType}
      </span>
    </p>
  );
}

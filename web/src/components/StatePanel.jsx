/**
 * The agent's shared state (`data-state`, the keys the gateway lists with --client-state), as the
 * latest assistant message that carries it has it: one line per key, its value as JSON.
 */
export function StatePanel({ state }) {
  const entries = Object.entries(state);
  return (
    <details className="state-panel" data-testid="state-panel" open>
      <summary>State</summary>
      {/* Scrolls when long: focusable, so the keyboard can scroll it too. */}
      <div className="state-body" role="region" aria-label="Shared state" tabIndex={0}>
        {entries.length === 0 ? (
          <p className="muted">(empty)</p>
        ) : (
          <dl>
            {entries.map(([key, value]) => (
              <div key={key} className="state-entry" data-testid="state-entry" data-key={key}>
                <dt>{key}</dt>
                <dd>
                  <code>{JSON.stringify(value)}</code>
                </dd>
              </div>
            ))}
          </dl>
        )}
      </div>
    </details>
  );
}

import { useState } from 'react';

/** The token form, shown when the gateway runs with `--auth jwt` or `api-keys`. */
export function SignIn({ problem, busy, onSubmit }) {
  const [token, setToken] = useState('');
  return (
    <form
      className="sign-in"
      data-testid="auth-form"
      autoComplete="off"
      aria-labelledby="sign-in-title"
      onSubmit={event => {
        event.preventDefault();
        if (!token.trim() || busy) return;
        onSubmit(token.trim());
        setToken('');
      }}
    >
      <h2 id="sign-in-title">Sign in</h2>
      <label htmlFor="auth-token">This gateway needs an access token (a JWT or an API key)</label>
      <div className="row">
        <input
          id="auth-token"
          data-testid="auth-token"
          type="password"
          spellCheck={false}
          autoFocus
          value={token}
          aria-invalid={problem ? true : undefined}
          aria-describedby={problem ? 'auth-error' : undefined}
          onChange={event => setToken(event.target.value)}
        />
        <button type="submit" data-testid="auth-submit" disabled={busy}>
          Sign in
        </button>
      </div>
      {problem && (
        <p id="auth-error" className="problem" data-testid="auth-error" role="alert">
          {problem}
        </p>
      )}
    </form>
  );
}

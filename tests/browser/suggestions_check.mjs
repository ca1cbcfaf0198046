// Evaluates the chat page's suggestion rules (web/src/suggestions.js) for the apps given, in Node
// (the module imports nothing): what the page would show for each, without a browser or gateway.
//
//   node suggestions_check.mjs '{"cases": {"name": {"app": {...} | null | "unknown"}}}'
//
// `app`: an entry as the page keeps it (`{name, model, tools}`), null (the gateway cannot say) or
// "unknown" (not known yet). Prints one JSON line: {ok, failures, results: {name: suggestions}}.

const failures = [];
const result = { ok: false, failures, results: {} };

try {
  const { suggestionsFor, MAX_TOOL_SUGGESTIONS } = await import('../../web/src/suggestions.js');
  result.max = MAX_TOOL_SUGGESTIONS;
  const { cases } = JSON.parse(process.argv[2] ?? '{}');
  for (const [name, { app }] of Object.entries(cases ?? {})) {
    result.results[name] = suggestionsFor(app === 'unknown' ? undefined : app);
  }
} catch (error) {
  failures.push(String(error.stack ?? error));
}
result.ok = failures.length === 0;
process.stdout.write(`${JSON.stringify(result)}\n`);
process.exitCode = result.ok ? 0 : 1;

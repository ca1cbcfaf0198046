import { getToolName, isToolUIPart } from 'ai';
import { playTune } from './audio.js';

/**
 * The demo agent's browser tools: the gateway announces their calls without `providerExecuted`,
 * the page runs them and answers with `addToolOutput`. `needsApproval` mirrors the agent: such a
 * call is announced once with its approval request, and again after the user approved it.
 */
export const browserTools = {
  change_bgm: {
    needsApproval: true,
    run: ({ track }) => {
      playTune(track);
      return { playing: track };
    },
  },
  get_location: { needsApproval: true, run: getLocation },
};

function getLocation() {
  return new Promise((resolve, reject) => {
    if (!navigator.geolocation) {
      reject(new Error('Location unavailable: this browser has no geolocation.'));
      return;
    }
    navigator.geolocation.getCurrentPosition(
      ({ coords }) => resolve({ latitude: coords.latitude, longitude: coords.longitude, accuracy: coords.accuracy }),
      error => reject(new Error(`Location unavailable: ${error.message || 'permission denied'}.`)),
      { timeout: 10_000, maximumAge: 60_000 },
    );
  });
}

/** Whether the user chose "Always allow" for this tool earlier in the chat. */
export function alwaysAllowed(messages, toolName) {
  return messages.some(message =>
    message.parts.some(
      part =>
        isToolUIPart(part) &&
        getToolName(part) === toolName &&
        part.approval?.approved === true &&
        part.approval?.reason === 'always',
    ),
  );
}

/**
 * Whether a browser tool call may run now: it needs no approval, it was approved, or the tool is
 * always allowed (the gateway then announces later calls without asking).
 */
export function mayRun(messages, toolCall) {
  const tool = browserTools[toolCall.toolName];
  if (tool == null) return false;
  if (!tool.needsApproval || alwaysAllowed(messages, toolCall.toolName)) return true;
  return messages.some(message =>
    message.parts.some(
      part => isToolUIPart(part) && part.toolCallId === toolCall.toolCallId && part.approval?.approved === true,
    ),
  );
}

/** Runs a browser tool; `report` gets `{output}` or `{errorText}`. Each call runs once per page. */
const started = new Set();

export function runBrowserTool(toolCall, report) {
  if (started.has(toolCall.toolCallId)) return;
  started.add(toolCall.toolCallId);
  Promise.resolve()
    .then(() => browserTools[toolCall.toolName].run(toolCall.input ?? {}))
    .then(
      output => report({ output }),
      error => report({ errorText: error instanceof Error ? error.message : String(error) }),
    );
}

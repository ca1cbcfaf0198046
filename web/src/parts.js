import { getToolName, isToolUIPart } from 'ai';
import { browserTools } from './tools.js';

/** ADK's end-user sign-in for a tool: the gateway announces it as a call of this tool. */
export const SIGN_IN_TOOL = 'adk_request_credential';

/**
 * A long-running tool's call (ADK `LongRunningFunctionTool`) waiting for an answer from outside:
 * announced without `providerExecuted`, and neither one of the page's browser tools nor a sign-in.
 */
export function awaitsAnswer(part) {
  if (!isToolUIPart(part) || part.state !== 'input-available' || part.providerExecuted) return false;
  const name = getToolName(part);
  return name !== SIGN_IN_TOOL && browserTools[name] == null;
}

/** The latest interim result (`data-tool-status`) of a call in this message, if any. */
export function toolStatusOf(message, toolCallId) {
  const part = message.parts.findLast(p => p.type === 'data-tool-status' && p.data?.toolCallId === toolCallId);
  return part?.data;
}

/** The name of the tool whose call a sign-in is for: the input names it, or its call in the message. */
export function signInToolName(message, part) {
  if (part.input?.toolName) return String(part.input.toolName);
  const call = message.parts.find(p => isToolUIPart(p) && p.toolCallId === part.input?.toolCallId);
  return call ? getToolName(call) : undefined;
}

/** The calls of this message that wait for the user's sign-in (their tool asked for a credential). */
export function callsAwaitingSignIn(message) {
  const parts = message.parts.filter(
    p => isToolUIPart(p) && getToolName(p) === SIGN_IN_TOOL && p.state === 'input-available',
  );
  return new Set(parts.map(p => p.input?.toolCallId));
}

/** The message's grounding, shown under it: distinct sources and the search suggestions' HTML. */
export function groundingOf(message) {
  const sources = new Map();
  const suggestions = new Set();
  for (const part of message.parts) {
    if (part.type === 'source-url') sources.set(`url:${part.url}`, part);
    else if (part.type === 'source-document') sources.set(`doc:${part.title}:${part.filename ?? ''}`, part);
    else if (part.type === 'data-search-suggestions' && part.data?.html) suggestions.add(part.data.html);
  }
  return { sources: [...sources.values()], suggestions: [...suggestions] };
}

/** The shared state of the latest assistant message that has one (`data-state`), or undefined. */
export function latestState(messages) {
  for (const message of [...messages].reverse()) {
    if (message.role !== 'assistant') continue;
    const part = message.parts.findLast(p => p.type === 'data-state');
    if (part && part.data && typeof part.data === 'object') return part.data;
  }
  return undefined;
}

/**
 * A file part's name: its `filename`, else the artifact's name in a gateway link
 * (`…/artifacts/<name>/versions/<n>`), else the URL's last path segment.
 */
export function fileNameOf(part) {
  if (part.filename) return part.filename;
  try {
    const url = new URL(part.url);
    if (url.protocol === 'data:') return undefined;
    const artifact = /\/artifacts\/([^/]+)\/versions\/\d+$/.exec(url.pathname);
    const name = artifact ? artifact[1] : url.pathname.split('/').filter(Boolean).at(-1);
    return name ? decodeURIComponent(name) : undefined;
  } catch {
    return undefined;
  }
}

/** The host a link points to, for showing beside its title. */
export function hostOf(url) {
  try {
    return new URL(url).host;
  } catch {
    return '';
  }
}

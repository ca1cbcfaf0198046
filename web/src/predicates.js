/**
 * `sendAutomaticallyWhen` for the gateway's chat page (ai 6 and 7 alike).
 *
 * It is the AI SDK's two predicates combined:
 *   lastAssistantMessageIsCompleteWithApprovalResponses
 *     || lastAssistantMessageIsCompleteWithToolCalls
 *
 * Why this is safe with the gateway: a browser tool with approval takes at
 * most 3 POSTs and never loops.
 *   1. The user's message. The answer announces the call
 *      (`tool-input-available`, no `providerExecuted`) and asks for approval
 *      (`tool-approval-request`, `finish{tool-calls}`). The part ends in
 *      `approval-requested`, so neither predicate holds: nothing is sent.
 *   2. The approval (`addToolApprovalResponse`): the part is
 *      `approval-responded`, the first predicate holds and the chat POSTs.
 *      Approved: the gateway re-announces the call with `tool-input-available`
 *      (the page's signal to run the tool) and ends with `finish{tool-calls}`;
 *      while the part waits in `input-available` neither predicate holds.
 *      Denied: the answer is `tool-output-denied` and the model's text, the
 *      last step then has no open browser tool part: the turn is over (2 POSTs).
 *   3. The page runs the tool and calls `addToolOutput`: the part is
 *      `output-available` (no `approval-responded` part is left, so the first
 *      predicate is false) and the second predicate holds: the chat POSTs the
 *      result. The model answers in a new step (`start-step` … text), whose
 *      parts hold no browser tool call, so neither predicate holds again.
 * A server tool with approval takes 2 POSTs (the tool runs in the answer to
 * the approval); a browser tool without approval takes 2 (call, output).
 */

import {
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
} from 'ai';

/**
 * @param {{messages: import('ai').UIMessage[]}} options
 * @returns {boolean}
 */
export function sendAutomaticallyWhen({ messages }) {
  return (
    lastAssistantMessageIsCompleteWithApprovalResponses({ messages }) ||
    lastAssistantMessageIsCompleteWithToolCalls({ messages })
  );
}

export default sendAutomaticallyWhen;

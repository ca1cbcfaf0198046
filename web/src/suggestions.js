/**
 * The suggestions under the message box, from the app the chat talks to (`GET /api/apps`).
 *
 * - One per tool of the app (up to MAX_TOOL_SUGGESTIONS), showing its name, whether it needs
 *   approval, runs in the browser or answers later, and its description. A tool without required
 *   arguments is called at once; one with required arguments fills the message box with the call
 *   for the user to complete (the first argument selected), since the page cannot guess them.
 * - What the message says depends on the app's model: the scripted model (the offline default,
 *   `scripted` or `scripted-*`) calls any tool with `/tool NAME {JSON}`; any other model (Gemini)
 *   gets a plain request, "Use the NAME tool.", which a real model understands and `/tool` is not
 *   meant for.
 * - From `GET /api/apps`: the app's `model` (its name) and each tool's `parameters` (the JSON
 *   Schema of its arguments, whose `required` list says what must be filled in). A gateway that
 *   does not give them: a model not known to be the scripted one, and no arguments known.
 * - The demo agent (its four tools, by name) keeps its hand-written examples, which give each tool
 *   the arguments it needs, so one click runs each approval path: the `/tool` commands on the
 *   scripted model, and the same requests in words on another model (or one the gateway does not
 *   name) — words the scripted model's keyword rules also answer with the same call.
 * - The scripted model's own commands (`/echo`, `/stream`, `/think`, `/image`) follow the tools
 *   when the app runs on it.
 *
 * `appInfo`: the app's entry (`useApps`), `undefined` while not known yet (no suggestions), or
 * `null` when the gateway cannot say (an older gateway): then the demo agent's commands on the
 * scripted model, as the page always showed.
 */

export const MAX_TOOL_SUGGESTIONS = 8;

/** The scripted model's commands that are not about tools. */
const MODEL_COMMANDS = ['/echo hello', '/stream 20 50', '/think why', '/image'];

/** The demo agent's tools (CONTRACT.md, "The demo agent") and an example call of each. */
const DEMO_TOOLS = [
  {
    name: 'get_weather',
    description: 'Returns the current weather for a location.',
    scripted: '/tool get_weather {"location":"Paris"}',
    words: 'What is the weather in Paris?',
    needsApproval: false,
    runsInBrowser: false,
  },
  {
    name: 'process_payment',
    description: 'Sends a payment. Needs the user’s approval.',
    scripted: '/tool process_payment {"amount": 5, "recipient": "bob"}',
    words: 'Pay 5 USD to bob.',
    needsApproval: true,
    runsInBrowser: false,
  },
  {
    name: 'change_bgm',
    description: 'Changes the background music in the user’s browser.',
    scripted: '/tool change_bgm {"track": 2}',
    words: 'Play background music track 2.',
    needsApproval: true,
    runsInBrowser: true,
  },
  {
    name: 'get_location',
    description: 'Returns the user’s location, as the browser reports it.',
    scripted: '/tool get_location {}',
    words: 'Where am I?',
    needsApproval: true,
    runsInBrowser: true,
  },
];

/** Whether `model` (an app's model name) is the scripted model, which answers `/tool` and the other commands. */
export function isScriptedModel(model) {
  return typeof model === 'string' && (model === 'scripted' || model.startsWith('scripted-'));
}

/** The badges of a tool: approval, browser, long-running. */
export function badgesOf(tool) {
  const badges = [];
  if (tool.needsApproval) badges.push({ kind: 'approval', label: 'approval', title: 'Asks for your approval first' });
  if (tool.runsInBrowser) badges.push({ kind: 'browser', label: 'browser', title: 'Runs in this page' });
  if (tool.longRunning) badges.push({ kind: 'long-running', label: 'long-running', title: 'Its result comes later' });
  return badges;
}

function isDemo(tools) {
  if (tools.length !== DEMO_TOOLS.length) return false;
  const names = new Set(tools.map(tool => tool.name));
  return DEMO_TOOLS.every(tool => names.has(tool.name));
}

/** The required arguments of a tool, from its JSON Schema `parameters`: `[{name, type}]` (none when not known). */
export function requiredArguments(tool) {
  const schema = tool.parameters;
  if (schema == null || typeof schema !== 'object' || !Array.isArray(schema.required)) return [];
  const properties = schema.properties && typeof schema.properties === 'object' ? schema.properties : {};
  return schema.required
    .filter(name => typeof name === 'string' && name)
    .map(name => ({ name, type: typeOf(properties[name]) }));
}

function typeOf(property) {
  const type = Array.isArray(property?.type) ? property.type.find(t => t !== 'null') : property?.type;
  return typeof type === 'string' ? type.toLowerCase() : 'string';
}

const PLACEHOLDERS = { integer: '0', number: '0', boolean: 'false', array: '[]', object: '{}' };

/**
 * The message box's text for a call of `tool` with its required arguments left to fill, and the
 * range to select: inside the first string's quotes, or the first value (typing replaces it).
 */
export function callTemplate(tool, required, scripted) {
  let text;
  let selection = null;
  if (scripted) {
    text = `/tool ${tool.name} {`;
    required.forEach(({ name, type }, index) => {
      text += `${index ? ', ' : ''}${JSON.stringify(name)}: `;
      const value = PLACEHOLDERS[type] ?? '""';
      if (selection == null) {
        // A string: the caret between its quotes; any other value: selected.
        selection = value === '""' ? [text.length + 1, text.length + 1] : [text.length, text.length + value.length];
      }
      text += value;
    });
    text += '}';
  } else {
    text = `Use the ${tool.name} tool with `;
    required.forEach(({ name }, index) => {
      text += `${index ? ', ' : ''}${name}: `;
      if (selection == null) selection = [text.length, text.length + 1];
      text += '?';
    });
  }
  return { text, selection };
}

/** A suggestion for one tool of a (non-demo) app. */
function toolSuggestion(tool, scripted) {
  const required = requiredArguments(tool);
  const base = {
    key: `tool:${tool.name}`,
    kind: 'tool',
    toolName: tool.name,
    label: tool.name,
    badges: badgesOf(tool),
  };
  if (required.length > 0) {
    const { text, selection } = callTemplate(tool, required, scripted);
    const names = required.map(argument => argument.name).join(', ');
    return {
      ...base,
      action: 'fill',
      text,
      selection,
      detail: tool.description || `needs ${names}`,
      title: `Writes “${text}” in the message box: fill in ${names}, then send.`,
    };
  }
  const text = scripted ? `/tool ${tool.name} {}` : `Use the ${tool.name} tool.`;
  return { ...base, action: 'send', text, detail: tool.description || text, title: `Sends “${text}”.` };
}

function demoSuggestion(tool, scripted) {
  const text = scripted ? tool.scripted : tool.words;
  return {
    key: `tool:${tool.name}`,
    kind: 'tool',
    toolName: tool.name,
    label: tool.name,
    badges: badgesOf(tool),
    action: 'send',
    text,
    detail: text,
    title: `Sends “${text}”.`,
  };
}

function commandSuggestions(scripted) {
  if (!scripted) return [];
  return MODEL_COMMANDS.map(text => ({
    key: `command:${text}`,
    kind: 'command',
    label: text,
    badges: [],
    action: 'send',
    text,
    title: `Sends “${text}”.`,
  }));
}

/**
 * The suggestions for an app: `{tools, commands, more}` (`more`: the names of the tools beyond
 * MAX_TOOL_SUGGESTIONS).
 */
export function suggestionsFor(appInfo) {
  if (appInfo === undefined) return { tools: [], commands: [], more: [] };
  if (appInfo === null || !Array.isArray(appInfo.tools)) {
    // The gateway does not list its tools: the demo agent on the scripted model, as before.
    return { tools: DEMO_TOOLS.map(tool => demoSuggestion(tool, true)), commands: commandSuggestions(true), more: [] };
  }
  const scripted = isScriptedModel(appInfo.model);
  const { tools } = appInfo;
  if (isDemo(tools)) {
    const served = new Map(tools.map(tool => [tool.name, tool]));
    // The examples, with the badges the gateway gives (the agent's own definition).
    const examples = DEMO_TOOLS.map(example => {
      const { scripted: command, words } = example;
      return demoSuggestion({ ...example, ...served.get(example.name), scripted: command, words }, scripted);
    });
    return { tools: examples, commands: commandSuggestions(scripted), more: [] };
  }
  return {
    tools: tools.slice(0, MAX_TOOL_SUGGESTIONS).map(tool => toolSuggestion(tool, scripted)),
    commands: commandSuggestions(scripted),
    more: tools.slice(MAX_TOOL_SUGGESTIONS).map(tool => tool.name),
  };
}

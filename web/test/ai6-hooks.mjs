// `npm test` runs the ai 6 port (ws-transport/) and the page's predicate (src/predicates.js)
// against ai 6, the version that port is for: inside src/, test/ and ws-transport/, `ai` resolves
// to the `ai6` package (an npm alias of ai@6), while the page itself is built with ai 7.
import { register } from 'node:module';

const hooks = `
const scope = ${JSON.stringify(['../src/', './', '../ws-transport/'].map(dir => new URL(dir, import.meta.url).href))};
export async function resolve(specifier, context, next) {
  if (specifier === 'ai' && scope.some(dir => context.parentURL?.startsWith(dir))) {
    return next('ai6', context);
  }
  return next(specifier, context);
}`;
register(`data:text/javascript,${encodeURIComponent(hooks)}`);

/**
 * Builds the chat page into web/dist/: bundles src/main.js (with `ai` and
 * zod) into dist/app.js for the browser, and copies index.html and
 * src/style.css. The gateway serves dist/index.html at `/` and dist/ at
 * `/static/`. Usage: `npm run build` (add `--dev` for an unminified bundle).
 */
import { build } from 'esbuild';
import { copyFile, mkdir, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = dirname(fileURLToPath(import.meta.url));
const dist = join(root, 'dist');
const dev = process.argv.includes('--dev');

await rm(dist, { recursive: true, force: true });
await mkdir(dist, { recursive: true });

const result = await build({
  entryPoints: [join(root, 'src/main.js')],
  outfile: join(dist, 'app.js'),
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: ['es2022'],
  minify: !dev,
  sourcemap: true,
  legalComments: 'linked',
  define: { 'process.env.NODE_ENV': dev ? '"development"' : '"production"' },
  logLevel: 'warning',
  metafile: true,
});

await copyFile(join(root, 'index.html'), join(dist, 'index.html'));
await copyFile(join(root, 'src/style.css'), join(dist, 'style.css'));

const bytes = Object.values(result.metafile.outputs).find(o => o.entryPoint)?.bytes;
console.log(`built web/dist: index.html, style.css, app.js (${bytes} bytes)`);

// Builds the chat page into dist/: the gateway serves dist/index.html at `/` and dist/ at
// `/static/` (so the built page loads /static/assets/…). `npm run dev` serves the page with hot
// reload and forwards /api (HTTP and the WebSocket) to a gateway on 127.0.0.1:8080.
import react from '@vitejs/plugin-react';
import { defineConfig } from 'vite';

const gateway = process.env.GATEWAY_URL ?? 'http://127.0.0.1:8080';

export default defineConfig(({ command }) => ({
  base: command === 'build' ? '/static/' : '/',
  plugins: [react()],
  build: {
    target: 'es2022',
    sourcemap: true,
    assetsInlineLimit: 0, // the microphone's AudioWorklet stays a file of its own
    chunkSizeWarningLimit: 800, // React, react-markdown and `ai` (with its chunk schemas)
  },
  server: { proxy: { '/api': { target: gateway, ws: true, changeOrigin: false } } },
}));

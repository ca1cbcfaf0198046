import { getAudio } from '../audio.js';

/**
 * Plays the model's voice as it arrives: each `data-pcm` chunk (base64 PCM16 mono) becomes an
 * AudioBuffer scheduled right after the previous one, so playback starts with the first chunk
 * and has no gaps. `stop()` (barge-in) silences everything scheduled at once.
 */
export class PcmPlayer {
  constructor() {
    this.audio = getAudio();
    this.sources = new Set();
    this.cursor = 0; // when the last scheduled buffer ends, in AudioContext time
  }

  /**
   * `data` of a `data-pcm` chunk: {content, sampleRate, channels: 1, bitDepth: 16}; `messageId`,
   * the UI message (turn) it belongs to, is told back by `stop()`.
   */
  play({ content, sampleRate }, messageId) {
    const { context, output } = this.audio;
    const bytes = Uint8Array.from(atob(content), c => c.charCodeAt(0));
    const pcm = new Int16Array(bytes.buffer, 0, bytes.length >> 1);
    if (pcm.length === 0) return;
    const buffer = context.createBuffer(1, pcm.length, sampleRate);
    const samples = buffer.getChannelData(0);
    for (let i = 0; i < pcm.length; i++) samples[i] = pcm[i] / 32768;

    const source = new AudioBufferSourceNode(context, { buffer });
    source.connect(output);
    // A little headroom after a pause, so the first buffers do not start late and click.
    const at = Math.max(this.cursor, context.currentTime + 0.05);
    source.start(at);
    this.cursor = at + buffer.duration;
    source.messageId = messageId;
    this.sources.add(source);
    source.onended = () => {
      this.sources.delete(source);
      source.disconnect();
    };
  }

  /** True while audio plays or is scheduled to. */
  get playing() {
    return this.sources.size > 0;
  }

  /** Seconds of audio scheduled but not yet played. */
  get queued() {
    return this.sources.size === 0 ? 0 : Math.max(0, this.cursor - this.audio.context.currentTime);
  }

  /**
   * Barge-in: every scheduled buffer stops now. Returns the ids of the messages whose audio was
   * cut (still playing or yet to play).
   */
  stop() {
    const cut = new Set();
    for (const source of this.sources) {
      if (source.messageId != null) cut.add(source.messageId);
      source.onended = null;
      source.stop();
      source.disconnect();
    }
    this.sources.clear();
    this.cursor = 0;
    return cut;
  }
}

/**
 * The page's own voice check, for barge-in in hands-free mode: the gateway finds the user's
 * utterances in the audio it receives, but a model sends its answer faster than it plays, so by
 * the time the gateway hears the user there is often nothing left on its side to cut. The page
 * holds the rest of the answer, so the page must stop it.
 *
 * It looks at the microphone's 20 ms frames (RMS, after the browser's echo cancellation, noise
 * suppression and gain control, which the microphone asks for) and says "voice" once `holdMs` of
 * consecutive frames are at or above `thresholdDbfs`.
 *
 * What keeps the answer's own sound out: the echo canceller (`echoCancellation: true`, Chromium's
 * default too) removes what the page plays from what the microphone hears; what it leaves is well
 * below the threshold, which is 10 dB above the gateway's own voice detection (-45 dBFS), and must
 * last `holdMs` (the gateway's detection wants 100 ms), so a click or a short residue does not cut
 * the answer. Without echo cancellation (some headsets, some browsers) a loud speaker can cut its
 * own answer: use headphones or push-to-talk there.
 */
export const VOICE_DBFS = -35;
export const VOICE_HOLD_MS = 40;
const FRAME_MS = 20;

/** RMS (0..1) of a frame of PCM16 (an ArrayBuffer). */
export function rms(buffer) {
  const pcm = new Int16Array(buffer);
  let sum = 0;
  for (const sample of pcm) sum += sample * sample;
  return pcm.length ? Math.sqrt(sum / pcm.length) / 32768 : 0;
}

export class VoiceCheck {
  constructor({ thresholdDbfs = VOICE_DBFS, holdMs = VOICE_HOLD_MS, frameMs = FRAME_MS } = {}) {
    this.threshold = 10 ** (thresholdDbfs / 20);
    this.frames = Math.max(1, Math.ceil(holdMs / frameMs));
    this.run = 0;
  }

  /** One frame's RMS; true from the frame that completes the hold until the voice stops. */
  feed(level) {
    this.run = level < this.threshold ? 0 : this.run + 1;
    return this.run >= this.frames;
  }

  reset() {
    this.run = 0;
  }
}

/**
 * One AudioContext for the page, and its output: everything the page plays (the model's voice,
 * the background music tool) goes through one AnalyserNode, so the page can show a level.
 */
let audio;

export function getAudio() {
  if (audio == null) {
    const context = new AudioContext({ latencyHint: 'interactive' });
    const output = context.createAnalyser();
    output.fftSize = 2048;
    output.connect(context.destination);
    const samples = new Float32Array(output.fftSize);
    const bins = new Float32Array(output.frequencyBinCount);
    audio = { context, output, samples, bins };
  }
  // Created or resumed after a click, so autoplay rules let it run.
  if (audio.context.state === 'suspended') audio.context.resume().catch(() => undefined);
  return audio;
}

/** The output's loudness now (RMS, 0..1) and its strongest frequency in Hz (0 when silent). */
export function outputLevel() {
  if (audio == null) return { level: 0, peakHz: 0 };
  const { context, output, samples, bins } = audio;
  output.getFloatTimeDomainData(samples);
  let sum = 0;
  for (const sample of samples) sum += sample * sample;
  const level = Math.sqrt(sum / samples.length);
  if (level < 0.001) return { level, peakHz: 0 };
  output.getFloatFrequencyData(bins);
  let peak = 0;
  for (let i = 1; i < bins.length; i++) if (bins[i] > bins[peak]) peak = i;
  return { level, peakHz: (peak * context.sampleRate) / output.fftSize };
}

/** Background music for the demo agent's `change_bgm` tool: a short tune, higher for higher tracks. */
export function playTune(track) {
  const { context, output } = getAudio();
  const base = 220 * 2 ** ((Math.abs(Number(track) || 1) % 12) / 12);
  const start = context.currentTime + 0.05;
  [1, 5 / 4, 3 / 2, 2].forEach((ratio, i) => {
    const oscillator = new OscillatorNode(context, { type: 'triangle', frequency: base * ratio });
    const gain = new GainNode(context, { gain: 0 });
    const at = start + i * 0.25;
    gain.gain.setValueAtTime(0, at);
    gain.gain.linearRampToValueAtTime(0.2, at + 0.02);
    gain.gain.exponentialRampToValueAtTime(0.001, at + 0.24);
    oscillator.connect(gain).connect(output);
    oscillator.start(at);
    oscillator.stop(at + 0.25);
  });
}

/**
 * AudioWorklet processor: the microphone as PCM16 mono at 16 kHz, posted to the main thread in
 * 20 ms buffers (320 samples, an ArrayBuffer each). The context runs at the device's rate
 * (`sampleRate`, e.g. 48 kHz); each output sample is the mean of the input samples it covers,
 * a box filter that also keeps most of the aliasing out.
 */
const TARGET_RATE = 16000;
const FRAME = 320;

class MicPcm16Processor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.step = sampleRate / TARGET_RATE; // input samples per output sample
    this.position = 0;
    this.sum = 0;
    this.count = 0;
    this.frame = new Int16Array(FRAME);
    this.length = 0;
  }

  process(inputs) {
    const channel = inputs[0]?.[0];
    if (channel == null) return true;
    for (const sample of channel) {
      this.sum += sample;
      this.count += 1;
      this.position += 1;
      if (this.position < this.step) continue;
      this.position -= this.step;
      const value = Math.max(-1, Math.min(1, this.sum / this.count));
      this.sum = 0;
      this.count = 0;
      this.frame[this.length++] = value < 0 ? value * 0x8000 : value * 0x7fff;
      if (this.length === FRAME) {
        this.port.postMessage(this.frame.buffer, [this.frame.buffer]);
        this.frame = new Int16Array(FRAME);
        this.length = 0;
      }
    }
    return true;
  }
}

registerProcessor('mic-pcm16', MicPcm16Processor);

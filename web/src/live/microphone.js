import { getAudio } from '../audio.js';
import workletUrl from './mic-worklet.js?url';

let workletLoaded; // the processor is registered once per AudioContext (the page has one)

/**
 * Opens the microphone and calls `onPcm(ArrayBuffer)` with 20 ms of PCM16 mono 16 kHz at a time.
 * Returns `close()`, which releases the microphone.
 */
export async function openMicrophone(onPcm) {
  const { context } = getAudio();
  const stream = await navigator.mediaDevices.getUserMedia({
    audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true },
  });
  try {
    workletLoaded ??= context.audioWorklet.addModule(workletUrl);
    await workletLoaded;
  } catch (error) {
    workletLoaded = undefined;
    stream.getTracks().forEach(track => track.stop());
    throw error;
  }
  const source = context.createMediaStreamSource(stream);
  const worklet = new AudioWorkletNode(context, 'mic-pcm16', { numberOfInputs: 1, numberOfOutputs: 0 });
  worklet.port.onmessage = event => onPcm(event.data);
  source.connect(worklet);
  return () => {
    worklet.port.onmessage = null;
    source.disconnect();
    worklet.disconnect();
    stream.getTracks().forEach(track => track.stop());
  };
}

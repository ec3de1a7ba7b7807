// The capture-time strip (drivers/camera/strip.py): 40 blocks in the bottom rows of the picture, block 0
// white, block 1 black, 32 bits of the capture time in ms mod 2^32, 6 check bits. Read from whatever is
// on screen (a <video> frame, the WebCodecs canvas, the JPEG <img>) through one small canvas.

const BLOCKS = 40;
const W = BLOCKS * 4;          // 4 canvas pixels per block: sample the middle two
let canvas = null;
let ctx = null;

function check(v) {
  const x = ((v ^ (v >>> 8) ^ (v >>> 16) ^ (v >>> 24)) & 0xff) >>> 0;
  return (x ^ (x >>> 6)) & 0x3f;
}

/** The strip's value (ms mod 2^32) from `source` of `width`×`height` pixels, or null (no valid strip). */
export function readStrip(source, width, height) {
  const bw = Math.floor(width / BLOCKS);
  if (bw < 2 || height < 4 * bw) return null;
  if (!canvas) {
    canvas = document.createElement("canvas");
    canvas.width = W;
    canvas.height = 4;
    ctx = canvas.getContext("2d", { willReadFrequently: true });
  }
  try {
    ctx.drawImage(source, 0, height - bw, BLOCKS * bw, bw, 0, 0, W, 4);
  } catch {
    return null;
  }
  const px = ctx.getImageData(0, 1, W, 2).data;
  const means = [];
  for (let i = 0; i < BLOCKS; i += 1) {
    let sum = 0;
    for (const row of [0, 1]) for (const dx of [1, 2]) {
      const o = (row * W + i * 4 + dx) * 4;
      sum += (px[o] + px[o + 1] + px[o + 2]) / 3;
    }
    means.push(sum / 4);
  }
  const white = means[0];
  const black = means[1];
  if (white - black < 60) return null;
  const thr = (white + black) / 2;
  let v = 0;
  for (let i = 2; i < 34; i += 1) v = ((v * 2) + (means[i] > thr ? 1 : 0)) >>> 0;
  let c = 0;
  for (let i = 34; i < 40; i += 1) c = (c << 1) | (means[i] > thr ? 1 : 0);
  return c === check(v) ? v : null;
}

/** The full time in ms of a strip value, taking the wrap nearest `nearMs`. */
export function unwrapMs(value, nearMs) {
  const M = 2 ** 32;
  let base = nearMs - (((nearMs - value) % M) + M) % M;
  if (nearMs - base > M / 2) base += M;
  return base;
}

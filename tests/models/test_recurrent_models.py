"""Real models with If and LSTM from PyPI wheels, against onnxruntime, through Predictor and the pool.

* silero-vad 6.2.3: voice-activity detector (If on the sample rate, nested Ifs,
  LSTM), streamed over 32 ms chunks of a voiced signal with its state carried,
  at 16 kHz and 8 kHz.
* g2p-id-py 0.4.2: LSTM encoder and decoder (tf2onnx), greedy decoding of words.
* ddddocr 1.6.1: CRNN recognizer (bidirectional LSTM) on rendered text lines.

Criterion: max |ours - onnxruntime| <= 1e-4 x max |onnxruntime| per output.
"""

from __future__ import annotations

import numpy as np
import pytest

from pooled_predictor import Config, PooledPredictor, Predictor
from pooled_predictor.zoo.fetch import DDDDOCR, G2P_ID, SILERO_VAD, fetch_wheel_models

TOL = 1e-4


def ort_session(path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def rel_err(ours, ref) -> float:
    ours, ref = np.asarray(ours), np.asarray(ref)
    assert ours.shape == ref.shape, f"shape {ours.shape} != reference {ref.shape}"
    return float(np.abs(ours.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


def check(name, ours: dict, ref: list, names: list) -> float:
    worst = max(rel_err(ours[n], r) for n, r in zip(names, ref))
    print(f"{name}: max abs error {worst:.2e} x max|ref|")
    assert worst <= TOL, f"{name}: {worst:.2e} > {TOL}"
    return worst


@pytest.fixture(scope="module")
def silero():
    return fetch_wheel_models(SILERO_VAD)["silero_vad/data/silero_vad.onnx"]


def voiced_signal(sr: int, seconds: float, seed: int = 0) -> np.ndarray:
    """Silence, then a vowel-like sound (120 Hz harmonics, formant weights, syllable envelope), then noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(sr * seconds)) / sr
    f0 = 120 * (1 + 0.05 * np.sin(2 * np.pi * 3 * t))
    phase = 2 * np.pi * np.cumsum(f0) / sr
    voice = sum(np.sin(k * phase) * np.exp(-((k * 120 - 700) / 400) ** 2) for k in range(1, 30))
    envelope = np.clip(np.sin(2 * np.pi * 4 * t), 0, None) * (t > seconds / 4)
    x = 0.3 * voice * envelope + 0.01 * rng.standard_normal(t.size)
    return (x / np.abs(x).max() * 0.5).astype(np.float32)


@pytest.mark.parametrize("sr,chunk", [(16000, 512), (8000, 256)])
def test_silero_vad_stream(silero, sr, chunk):
    """Chunks streamed with the state carried, as silero-vad's own OnnxWrapper does (64-sample context)."""
    context = 64 if sr == 16000 else 32
    audio = voiced_signal(sr, 0.5)
    sess, pred = ort_session(silero), Predictor(silero)
    state_ref = state_ours = np.zeros((2, 1, 128), np.float32)
    probs, feeds_seen = [], []
    ctx = np.zeros((1, context), np.float32)
    for start in range(0, audio.size - chunk + 1, chunk):
        x = np.concatenate([ctx, audio[None, start:start + chunk]], axis=1)
        ctx = x[:, -context:]
        sr_in = np.array(sr, np.int64)
        ref = sess.run(None, {"input": x, "state": state_ref, "sr": sr_in})
        ours = pred.run(None, {"input": x, "state": state_ours, "sr": sr_in})
        check(f"silero {sr} Hz chunk {start // chunk}", dict(zip(["output", "stateN"], ours)), ref,
              ["output", "stateN"])
        feeds_seen.append(({"input": x, "state": state_ref, "sr": sr_in}, ref))
        state_ref, state_ours = ref[1], ours[1]
        probs.append(float(ours[0][0, 0]))
    # The detector sees the signal: silence first (the first quarter), then the voiced part.
    assert max(probs[:4]) < 0.2 and max(probs[8:]) > 0.5, probs
    # The same chunks through the pool, each with onnxruntime's state as input.
    with PooledPredictor(Config(model_paths=[silero], num_threads=2)) as pool:
        futures = [(pool.forward(feeds), ref) for feeds, ref in feeds_seen]
        for k, (f, ref) in enumerate(futures):
            outs = f.result(timeout=120)
            check(f"silero {sr} Hz chunk {k} (pool)", outs, ref, ["output", "stateN"])


@pytest.fixture(scope="module")
def g2p():
    paths = fetch_wheel_models(G2P_ID)
    return paths["g2p_id/models/lstm/encoder_model.onnx"], paths["g2p_id/models/lstm/decoder_model.onnx"]


def one_hot_word(word: str, width: int) -> np.ndarray:
    x = np.zeros((1, len(word), width), np.float32)
    for i, c in enumerate(word):
        x[0, i, (ord(c) - ord("a") + 2) % width] = 1.0
    return x


@pytest.mark.parametrize("word", ["selamat", "pagi"])
def test_g2p_id_greedy_decoding(g2p, word):
    """Encoder, then 6 greedy decoder steps fed back with each side's own states."""
    enc_path, dec_path = g2p
    enc_ref, dec_ref = ort_session(enc_path), ort_session(dec_path)
    enc, dec = Predictor(enc_path), Predictor(dec_path)
    x = one_hot_word(word, 28)
    ref_states = enc_ref.run(None, {"input_1": x})
    our_states = enc.run(None, {"input_1": x})
    check(f"g2p encoder {word!r}", dict(zip("hc", our_states)), ref_states, ["h", "c"])
    token = np.zeros((1, 1, 32), np.float32)
    token[0, 0, 1] = 1.0
    names = [o.name for o in dec_ref.get_outputs()]
    with PooledPredictor(Config(model_paths=[dec_path], num_threads=1)) as pool:
        for step in range(6):
            feeds = {"input_2": token, "input_3": ref_states[0], "input_4": ref_states[1]}
            ref = dec_ref.run(None, feeds)
            check(f"g2p decoder {word!r} step {step}", dict(zip(names, dec.run(None, feeds))), ref, names)
            check(f"g2p decoder {word!r} step {step} (pool)", pool.forward(feeds).result(timeout=60), ref, names)
            token = np.zeros_like(token)
            token[0, 0, int(ref[0].argmax())] = 1.0
            ref_states = ref[1:]


@pytest.fixture(scope="module")
def ddddocr():
    return fetch_wheel_models(DDDDOCR)["ddddocr/common.onnx"]


def text_line(text: str, height: int = 64) -> np.ndarray:
    """A rendered text line, normalized as ddddocr does: gray, height 64, (x / 255 - 0.5) / 0.5."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=40)
    width = int(font.getlength(text)) + 16
    img = Image.new("L", (width, height), 255)
    ImageDraw.Draw(img).text((8, 8), text, fill=0, font=font)
    x = np.asarray(img, np.float32)[None, None] / 255.0
    return (x - 0.5) / 0.5


def test_ddddocr_recognizer(ddddocr):
    sess = ort_session(ddddocr)
    name = sess.get_outputs()[0].name
    lines = [text_line(t) for t in ("8k3Fq", "pooled42")]
    pred = Predictor(ddddocr)
    with PooledPredictor(Config(model_paths=[ddddocr], num_threads=2)) as pool:
        futures = [pool.forward({"input1": x}) for x in lines]
        for x, f in zip(lines, futures):
            ref = sess.run(None, {"input1": x})
            check(f"ddddocr {x.shape}", {name: pred.run(None, {"input1": x})[0]}, ref, [name])
            check(f"ddddocr {x.shape} (pool)", f.result(timeout=120), ref, [name])

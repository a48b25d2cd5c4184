"""The OCR demo: the page's text within 5% CER, and the pipeline's pieces."""

import subprocess
import sys

import numpy as np

from pooled_predictor import Config, PooledPredictor
from pooled_predictor.apps.ocr import (PAGE_TEXT, Box, Line, boxes_from_probability, character_error_rate,
                                       ctc_greedy_decode, load_image, read_page, reading_order)


def test_ctc_greedy_decode():
    charset = ["a", "b", "c"]
    # steps: a a blank a b b space(4) c  -> "aab c"
    seq = [1, 1, 0, 1, 2, 2, 4, 3]
    probs = np.full((len(seq), 5), 0.01, np.float32)
    probs[np.arange(len(seq)), seq] = 0.9
    text, conf = ctc_greedy_decode(probs, charset)
    assert text == "aab c" and abs(conf - 0.9) < 1e-6


def test_boxes_from_probability_labels_regions_and_pads():
    prob = np.zeros((32, 64), np.float32)
    prob[4:8, 2:30] = 0.9    # a line
    prob[20:24, 10:50] = 0.9  # another
    prob[28:29, 60:61] = 0.9  # a speck (too small)
    boxes = boxes_from_probability(prob, 2.0, 2.0, (64, 128, 3))
    assert len(boxes) == 2
    b = sorted(boxes, key=lambda b: b.y0)[0]
    assert b.x0 < 4 and b.x1 > 60 and b.y0 < 8 and b.y1 > 16  # scaled by 2 and unclipped


def test_reading_order_rows_then_left_to_right():
    lines = [Line(Box(50, 0, 90, 10, 1), "b", 1), Line(Box(0, 1, 40, 11, 1), "a", 1),
             Line(Box(0, 30, 40, 40, 1), "c", 1)]
    assert [l.text for l in reading_order(lines)] == ["a", "b", "c"]


def test_cer():
    assert character_error_rate("abc", "abc") == 0
    assert character_error_rate("abd", "abc") == 1 / 3
    assert character_error_rate("a  b\n\n", "a b") == 0


def test_reads_the_page_within_five_percent_cer(ppocr):
    from pooled_predictor.zoo import fetch_page_image
    image = load_image(fetch_page_image())
    with PooledPredictor(Config(model_paths=[ppocr.det, ppocr.rec], num_threads=2)) as pool:
        result = read_page(pool, image)
    cer = character_error_rate(result.text, PAGE_TEXT)
    print(f"\n{result.text}\nCER {cer:.2%}")
    assert result.text.startswith("Region-based segmentation")
    assert cer <= 0.05, result.text


def test_demo_command_runs():
    proc = subprocess.run([sys.executable, "-m", "pooled_predictor", "demo", "--threads", "2"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "Let us first determine markers" in proc.stdout
    assert "character error rate" in proc.stdout

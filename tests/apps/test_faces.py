"""The faces demo: res10 (Caffe) through the pool on skimage's astronaut photo, boxes drawn into a PNG."""

import numpy as np

from pooled_predictor import Config, PooledPredictor
from pooled_predictor.apps.faces import Face, detect_faces, draw_faces, faces_from_detections
from pooled_predictor.cli import main


def test_faces_from_detections_scales_clips_and_sorts():
    rows = np.array([[0, 1, 0.6, -0.1, 0.2, 0.5, 0.4], [0, 1, 0.9, 0.5, 0.5, 1.2, 1.0],
                     [0, 1, 0.3, 0, 0, 1, 1], [0, -1, -1, -1, -1, -1, -1]], np.float32)
    faces = faces_from_detections(rows[None, None], 200, 100, threshold=0.5)
    assert [round(f.score, 3) for f in faces] == [0.9, 0.6]
    assert faces[0] == Face(faces[0].score, 100.0, 50.0, 200.0, 100.0)
    assert faces[1].x0 == 0.0 and abs(faces[1].y1 - 40.0) < 1e-4


def test_demo_finds_the_astronauts_face_and_draws_it(tmp_path, capsys, res10, astronaut):
    out = tmp_path / "boxes.png"
    assert main(["faces", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "1 face(s)" in text and "score 1.0000" in text
    from PIL import Image

    drawn = np.asarray(Image.open(out).convert("RGB"))
    assert drawn.shape == astronaut.shape
    # the face (a person checked the PNG): the box lies around (180..272, 58..177) in pixels
    with PooledPredictor(Config(model_paths=[(res10.prototxt, res10.caffemodel)])) as pool:
        (face,) = detect_faces(pool, astronaut).result(timeout=60)
    assert 170 < face.x0 < 190 and 260 < face.x1 < 285 and 45 < face.y0 < 70 and 165 < face.y1 < 190
    edge = drawn[int(face.y0) + 1, int(face.x0) + 10:int(face.x1) - 10]
    assert np.all(edge == [0, 255, 0])  # the green box's top edge
    draw_faces(astronaut, [], tmp_path / "none.png")
    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "none.png").convert("RGB")), astronaut)

"""compiled/phases.py: the stride-phase split of a zero-padded input against numpy's slicing."""

import numpy as np
import pytest

from pooled_predictor.ops.cpu.compiled.phases import split_phases

rng = np.random.default_rng(5)


def reference(x, hq, wq, sh, sw, ph, pw):
    n, c, h, w = x.shape
    big = np.zeros((n, c, ph + max(h, sh * hq) + sh, pw + max(w, sw * wq) + sw), np.float32)
    big[:, :, ph:ph + h, pw:pw + w] = x
    return np.stack([big[:, :, a:a + sh * hq:sh, b:b + sw * wq:sw] for a in range(sh) for b in range(sw)], axis=2)


@pytest.mark.parametrize("shape", [(1, 3, 31, 37), (2, 4, 16, 32), (1, 1, 1, 1), (1, 2, 5, 2)])
@pytest.mark.parametrize("sh,sw", [(1, 1), (2, 2), (1, 2), (3, 2), (2, 3)])
@pytest.mark.parametrize("ph,pw", [(0, 0), (1, 1), (2, 0), (3, 5)])
def test_split_phases_is_the_padded_input_sliced(shape, sh, sw, ph, pw):
    x = rng.standard_normal(shape).astype(np.float32)
    x.flags.writeable = False
    n, c, h, w = shape
    # planes as a conv reads them: enough rows and columns for a 3x3 tap reach, or fewer (cropped)
    for hq, wq in [((h + 2 * ph) // sh + 1, (w + 2 * pw) // sw + 1), (max(1, h // sh), max(1, w // sw))]:
        planes = np.full(n * c * sh * sw * hq * wq + 7, np.nan, np.float32)
        split_phases(x, planes, hq, wq, sh, sw, ph, pw)
        got = planes[:-7].reshape(n, c, sh * sw, hq, wq)
        np.testing.assert_array_equal(got, reference(x, hq, wq, sh, sw, ph, pw))
        assert np.isnan(planes[-7:]).all()  # nothing written past the planes

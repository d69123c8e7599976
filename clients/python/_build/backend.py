"""A PEP 517 build backend for this one pure-Python package, standard library only, so
that `pip install ./clients/python` works without an index (pip installs a backend's
`requires` into an isolated environment from the index; this one requires nothing).

It builds a wheel of src/sandboxd (with py.typed) and an sdist of the project files."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "py3-none-any"


def _project():
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    proj = text.split("[project]", 1)[1]

    def field(key):
        m = re.search(r'^%s\s*=\s*"([^"]*)"' % key, proj, re.M)
        return m.group(1) if m else ""
    return field("name"), field("version"), field("description"), field("requires-python")


def _metadata():
    name, version, summary, python = _project()
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {summary}\n"
            f"Requires-Python: {python}\nClassifier: Typing :: Typed\n"
            f"Description-Content-Type: text/markdown\n\n{readme}")


def _package_files():
    src = os.path.join(ROOT, "src")
    for d, dirs, files in os.walk(os.path.join(src, "sandboxd")):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            if f.endswith((".py", ".typed")):
                full = os.path.join(d, f)
                yield full, os.path.relpath(full, src)


def _dist_info():
    name, version, _, _ = _project()
    return f"{name}-{version}.dist-info"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    di = os.path.join(metadata_directory, _dist_info())
    os.makedirs(di, exist_ok=True)
    with open(os.path.join(di, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    return _dist_info()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name, version, _, _ = _project()
    fname = f"{name}-{version}-{TAG}.whl"
    di = _dist_info()
    record = []

    def add(zf, arc, data):
        zf.writestr(zipfile.ZipInfo(arc, date_time=(2026, 1, 1, 0, 0, 0)), data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{arc},sha256={digest},{len(data)}")

    with zipfile.ZipFile(os.path.join(wheel_directory, fname), "w", zipfile.ZIP_DEFLATED) as zf:
        for full, arc in _package_files():
            with open(full, "rb") as f:
                add(zf, arc, f.read())
        add(zf, f"{di}/METADATA", _metadata().encode())
        add(zf, f"{di}/WHEEL", f"Wheel-Version: 1.0\nGenerator: sandboxd-backend\nRoot-Is-Purelib: true\nTag: {TAG}\n".encode())
        add(zf, f"{di}/top_level.txt", b"sandboxd\n")
        record.append(f"{di}/RECORD,,")
        zf.writestr(zipfile.ZipInfo(f"{di}/RECORD", date_time=(2026, 1, 1, 0, 0, 0)), "\n".join(record) + "\n")
    return fname


def build_sdist(sdist_directory, config_settings=None):
    name, version, _, _ = _project()
    base = f"{name}-{version}"
    fname = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, fname), "w:gz") as tf:
        for rel in ["pyproject.toml", "README.md", "_build/backend.py"]:
            tf.add(os.path.join(ROOT, rel), f"{base}/{rel}")
        for full, arc in _package_files():
            tf.add(full, f"{base}/src/{arc}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = _metadata().encode()
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return fname

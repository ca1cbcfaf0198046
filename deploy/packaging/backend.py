"""The build backend of adk-gateway: setuptools', plus the chat page in the package.

`pip install .`, `pip wheel .` and `python -m build` come here (pyproject.toml, `[build-system]`).
Before a wheel or an sdist is built, the page built by Vite (web/dist) is copied into the package
as `gateway/page`, which the app serves when it does not run from a checkout. When web/dist is
missing or older than the page's sources, it is built first (`npm ci` when web/node_modules is
missing, then `npm run build`), so a clean clone needs only Node >= 20 on the PATH. An sdist
carries the copied page, so a wheel built from it needs no Node. Editable installs (`make run`,
`make test`) serve web/dist from the checkout and copy nothing.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401  (the rest of the PEP 517/660 hooks, unchanged)
    build_editable,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "web"
BUILT = WEB / "dist"
PACKAGED = ROOT / "gateway" / "page"


def _newest_source() -> float:
    sources = [WEB / "index.html", WEB / "package-lock.json", *WEB.glob("vite.config.*"),
               *(p for p in (WEB / "src").rglob("*") if p.is_file())]
    return max((p.stat().st_mtime for p in sources if p.exists()), default=0.0)


def _build_page() -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("building the chat page needs Node >= 20 and npm on the PATH (or a built web/dist)")
    if not (WEB / "node_modules").is_dir():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=WEB, check=True)
    subprocess.run([npm, "run", "--silent", "build"], cwd=WEB, check=True)


def _package_page() -> None:
    if not WEB.is_dir():  # an sdist: the page is already in the package
        return
    index = BUILT / "index.html"
    if not index.is_file() or index.stat().st_mtime < _newest_source():
        _build_page()
    if PACKAGED.exists():
        shutil.rmtree(PACKAGED)
    # Source maps stay out of the package.
    shutil.copytree(BUILT, PACKAGED, ignore=shutil.ignore_patterns("*.map"))


def build_wheel(wheel_directory: str, config_settings: dict[str, Any] | None = None,
                metadata_directory: str | None = None) -> str:
    _package_page()
    # setuptools builds the wheel from build/lib, which keeps what an earlier build put there (a
    # module since removed or renamed would ship again): start it afresh.
    for stale in (ROOT / "build" / "lib", *(ROOT / "build").glob("bdist.*")):
        shutil.rmtree(stale, ignore_errors=True)
    return str(_setuptools.build_wheel(wheel_directory, config_settings, metadata_directory))


def build_sdist(sdist_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    _package_page()
    return str(_setuptools.build_sdist(sdist_directory, config_settings))

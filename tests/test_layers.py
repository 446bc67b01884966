"""The apps' layers hold (pyproject.toml's import-linter contracts), and an upward import breaks them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINT = REPO / ".venv" / "bin" / "lint-imports"
PACKAGES = ("lib", "modelserver", "apps", "bench", "ops", "llmchain_site")


def lint(root: Path) -> subprocess.CompletedProcess:
    binary = LINT if LINT.exists() else shutil.which("lint-imports")
    return subprocess.run([str(binary), "--config", str(root / "pyproject.toml"), "--no-cache"], cwd=root,
                          capture_output=True, text=True, timeout=120)


def test_the_layers_hold():
    result = lint(REPO)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "Contracts: 2 kept, 0 broken." in result.stdout


def test_an_upward_import_inside_a_function_breaks_them(tmp_path):
    for package in PACKAGES:
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "*.json"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    outbox = tmp_path / "apps" / "chain" / "outbox.py"
    outbox.write_text(outbox.read_text() + "\n\ndef _upward():\n    from apps.chat.models import Interaction\n"
                                            "    return Interaction\n")
    result = lint(tmp_path)
    assert result.returncode == 1
    assert "apps.chain is not allowed to import apps.chat" in result.stdout
    assert "apps.chain.outbox -> apps.chat.models" in result.stdout

"""Tests register evaluators of their own (lib/evaluators.py): importing this fixture into a test
module puts the registry back as it was after each of its tests."""

from __future__ import annotations

import pytest

from lib import evaluators


@pytest.fixture(autouse=True)
def isolated_evaluator_registry():
    saved = dict(evaluators._REGISTRY)
    yield
    evaluators._REGISTRY.clear()
    evaluators._REGISTRY.update(saved)

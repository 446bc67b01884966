"""Compiling contracts/*.sol again gives the committed artifacts in contracts/build/ (CONTRACTS.md)."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "contracts" / "build"
CONTRACTS = ("LLMChainAccess", "Identity", "Reputation", "Forwarder")

NODE = shutil.which("node")
SOLC = ROOT / "node_modules" / "solc" / "soljson.js"
OZ = ROOT / "node_modules" / "@openzeppelin" / "contracts" / "access" / "AccessControl.sol"

needs_toolchain = pytest.mark.skipif(
    NODE is None or not SOLC.is_file() or not OZ.is_file(),
    reason="needs `node` on PATH and `npm install` run (node_modules/solc, node_modules/@openzeppelin/contracts)",
)


@pytest.mark.parametrize("name", CONTRACTS)
def test_artifact_has_abi_and_bytecode(name):
    artifact = json.loads((BUILD / f"{name}.json").read_text())
    assert artifact["contractName"] == name
    assert isinstance(artifact["abi"], list) and artifact["abi"]
    for key in ("bytecode", "deployedBytecode"):
        code = artifact[key]
        assert code.startswith("0x") and len(code) > 2
        bytes.fromhex(code[2:])
    assert artifact["compiler"].startswith("0.8.")
    assert len(artifact["sourceHash"]) == 64


@needs_toolchain
def test_compile_check_reproduces_artifacts():
    proc = subprocess.run(
        [NODE, "contracts/compile.js", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"compile.js --check failed:\n{proc.stdout}\n{proc.stderr}"

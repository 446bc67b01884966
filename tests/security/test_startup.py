"""An unsafe deployment does not start: with DEBUG=0 and nothing else set, the site and every worker
refuse with one message that names each variable to set; with the production variables docs/operating.md
documents, `check --deploy` has nothing to say."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from apps.chain.node import DEV_KEYS
from ops.checks import unsafe_deployment, unsafe_settings

REPO = Path(__file__).resolve().parents[2]
TO_SET = ("SECRET_KEY", "LLMCHAIN_KEY_SECRETS", "ALLOWED_HOSTS", "LLMCHAIN_ADMIN_KEY", "LLMCHAIN_ORACLE_KEY")


@pytest.fixture(scope="module")
def var_dir(tmp_path_factory):
    """Where the commands keep their local files (their SQLite database is migrated once, by the first)."""
    return tmp_path_factory.mktemp("var")


def run(args: list[str], var_dir: Path, **env) -> subprocess.CompletedProcess:
    """A command as an operator starts it: this machine's PATH and nothing of the tests' settings."""
    environment = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"),
                   "LLMCHAIN_VAR_DIR": str(var_dir), **env}
    return subprocess.run(args, cwd=REPO, env=environment, capture_output=True, text=True, timeout=180)


def production() -> dict[str, str]:
    """The production variables of docs/operating.md's 'Deploying' section, with fresh secrets."""
    return {"DEBUG": "0", "SECRET_KEY": secrets.token_urlsafe(50), "LLMCHAIN_KEY_SECRETS": secrets.token_urlsafe(32),
            "ALLOWED_HOSTS": "llmchain.example.org", "LLMCHAIN_ADMIN_KEY": "0x" + secrets.token_hex(32),
            "LLMCHAIN_ORACLE_KEY": "0x" + secrets.token_hex(32), "LLMCHAIN_RPC_URL": "https://besu.example.org:8545",
            "LLMCHAIN_BEHIND_PROXY": "1"}


def assert_refused_naming_every_variable(result: subprocess.CompletedProcess) -> None:
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert output.count("(llmchain.E001)") == 1, output  # one message
    said = output[output.index("(llmchain.E001)"):]
    for name in TO_SET:
        assert f"{name}: " in said, (name, said)


COMMANDS = [["check"], ["up", "--no-demo", "--no-model"], ["chain", "work"], ["oracle", "work"], ["debate", "work"],
            ["runworker", "oracle-jobs"], ["health", "--follow"], ["migrate"]]
DAPHNE = [str(Path(sys.executable).with_name("daphne")), "-b", "127.0.0.1", "-p", "0", "llmchain_site.asgi:application"]


@pytest.fixture(scope="module")
def started_with_debug_off(var_dir, tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """Each command below and daphne started with DEBUG=0 and nothing else set, each a process of its own:
    forked, one after the other, from one process that read the settings and imported the site once in that
    environment (tests/security/forked_starts.py), rather than each start doing all of it again (about 1.5 of
    its 1.7 CPU-seconds). A start still running after 60 s is stopped (a command that did not refuse). By
    " ".join(command), daphne's by "daphne"."""
    cases = [("manage.py", ["manage.py", *command]) for command in COMMANDS] + [("daphne", DAPHNE)]
    out = tmp_path_factory.mktemp("starts")
    forks = run([sys.executable, "-m", "tests.security.forked_starts", json.dumps(cases), str(out), "60"], var_dir,
                DEBUG="0")
    assert forks.returncode == 0, forks.stdout + forks.stderr
    codes = json.loads(forks.stdout)
    return {" ".join(argv[1:]) if entry == "manage.py" else "daphne": subprocess.CompletedProcess(
        argv, code, (out / f"{n}.out").read_text(), (out / f"{n}.err").read_text())
        for n, ((entry, argv), code) in enumerate(zip(cases, codes, strict=True))}


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
def test_with_debug_off_and_nothing_else_set_nothing_starts(command, started_with_debug_off):
    assert_refused_naming_every_variable(started_with_debug_off[" ".join(command)])


@pytest.mark.slow
def test_daphne_refuses_to_serve_it_either(started_with_debug_off):
    """daphne runs no system checks: the ASGI module does (llmchain_site/asgi.py)."""
    assert_refused_naming_every_variable(started_with_debug_off["daphne"])


@pytest.mark.slow
def test_runserver_refuses_once_the_hosts_are_set_and_the_rest_is_not(var_dir):
    result = run([sys.executable, "manage.py", "runserver", "--noreload", "127.0.0.1:0"], var_dir, DEBUG="0",
                 ALLOWED_HOSTS="llmchain.example.org")
    assert result.returncode != 0 and "(llmchain.E001)" in result.stderr, result.stderr
    assert "SECRET_KEY: " in result.stderr and "ALLOWED_HOSTS: " not in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("proxy", ["1", "0"], ids=["behind a proxy", "TLS in daphne's front"])
def test_the_documented_production_variables_pass_check_deploy_without_a_word(proxy, var_dir):
    result = run([sys.executable, "manage.py", "check", "--deploy"], var_dir,
                 **{**production(), "LLMCHAIN_BEHIND_PROXY": proxy})
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "System check identified no issues (0 silenced).", result.stdout + result.stderr


@pytest.mark.slow
def test_a_laptop_needs_no_variable_at_all(var_dir):
    result = run([sys.executable, "manage.py", "check"], var_dir)
    assert result.returncode == 0 and "no issues" in result.stdout, result.stdout + result.stderr


# --- each rule on its own (in this process) ----------------------------------------------------------

@pytest.fixture
def deployed(settings):
    """Settings that pass: DEBUG off, strong secrets, own keys on a chain that is not a local one."""
    settings.DEBUG, settings.LLMCHAIN_PROFILE, settings.LLMCHAIN_DEV_CHAIN = False, "production", False
    settings.SECRET_KEY, settings.LLMCHAIN_KEY_SECRETS = "s" * 60, ["a key secret of its own"]
    settings.ALLOWED_HOSTS = ["llmchain.example.org"]
    settings.LLMCHAIN_ADMIN_KEY, settings.LLMCHAIN_ORACLE_KEY = "0x" + "11" * 32, "0x" + "22" * 32
    assert unsafe_settings() == []
    return settings


def named(settings) -> list[str]:
    return [name for name, _ in unsafe_settings()]


def test_a_short_secret_key_is_refused(deployed):
    deployed.SECRET_KEY = "x" * 49
    assert named(deployed) == ["SECRET_KEY"]
    [error] = unsafe_deployment()
    assert error.is_serious() and error.id == "llmchain.E001" and "shorter than 50 characters" in error.msg


def test_key_secrets_that_are_the_secret_key_are_refused_but_an_old_one_may_follow_a_new_one(deployed):
    deployed.LLMCHAIN_KEY_SECRETS = [deployed.SECRET_KEY]
    assert named(deployed) == ["LLMCHAIN_KEY_SECRETS"]
    deployed.LLMCHAIN_KEY_SECRETS = ["the new secret", deployed.SECRET_KEY]  # rotating away from it
    assert named(deployed) == []


@pytest.mark.parametrize("key", [DEV_KEYS[0], DEV_KEYS[3], DEV_KEYS[1].upper().replace("0X", "0x"),
                                 DEV_KEYS[2].removeprefix("0x")], ids=["first", "fourth", "upper case", "no 0x"])
def test_anvils_published_keys_are_refused_off_a_local_chain(deployed, key):
    deployed.LLMCHAIN_ADMIN_KEY = key
    assert named(deployed) == ["LLMCHAIN_ADMIN_KEY"]
    deployed.LLMCHAIN_ADMIN_KEY, deployed.LLMCHAIN_ORACLE_KEY = "0x" + "11" * 32, key
    assert named(deployed) == ["LLMCHAIN_ORACLE_KEY"]


def test_the_relayer_has_a_lane_of_its_own_unless_set_and_never_a_published_or_the_admins_key(deployed):
    from apps.chain.keys import admin_address, oracle_address, relayer_address

    deployed.LLMCHAIN_RELAYER_KEY = ""
    derived = relayer_address()
    assert named(deployed) == [] and derived not in (oracle_address(), admin_address())
    deployed.LLMCHAIN_ORACLE_KEY = "0x" + "23" * 32
    assert relayer_address() not in (derived, oracle_address()), "derived from the oracle's key"
    deployed.LLMCHAIN_RELAYER_KEY = DEV_KEYS[2]
    assert named(deployed) == ["LLMCHAIN_RELAYER_KEY"]
    deployed.LLMCHAIN_RELAYER_KEY = deployed.LLMCHAIN_ADMIN_KEY
    assert named(deployed) == ["LLMCHAIN_RELAYER_KEY"] and "the admin's key" in unsafe_settings()[0][1]
    deployed.LLMCHAIN_RELAYER_KEY = "0x" + "33" * 32
    assert named(deployed) == [] and relayer_address() != oracle_address()
    # Several relayers: each key is checked.
    deployed.LLMCHAIN_RELAYER_KEY = "0x" + "33" * 32 + ", " + "0x" + "44" * 32
    assert named(deployed) == []
    deployed.LLMCHAIN_RELAYER_KEY = "0x" + "33" * 32 + "," + DEV_KEYS[3]
    assert named(deployed) == ["LLMCHAIN_RELAYER_KEY"]


def test_the_oracle_may_not_sign_with_the_admins_key(deployed):
    deployed.LLMCHAIN_ORACLE_KEY = deployed.LLMCHAIN_ADMIN_KEY.upper().replace("0X", "0x")
    assert named(deployed) == ["LLMCHAIN_ORACLE_KEY"]
    assert "the admin's key" in unsafe_settings()[0][1]


def test_several_oracle_keys_are_each_checked_and_an_empty_one_is_refused(deployed):
    from apps.chain.keys import oracle_address, oracle_addresses, relayer_address

    deployed.LLMCHAIN_ORACLE_KEY = "0x" + "22" * 32 + ", 0x" + "55" * 32
    assert named(deployed) == [] and len(oracle_addresses()) == 2
    assert oracle_address() == oracle_addresses()[0] != relayer_address(), "the first: without an id"
    picked = {oracle_address("0x" + f"{n:064x}") for n in range(4)}
    assert picked == set(oracle_addresses()), "ids spread over both keys"
    deployed.LLMCHAIN_ORACLE_KEY = "0x" + "22" * 32 + "," + DEV_KEYS[3]
    assert named(deployed) == ["LLMCHAIN_ORACLE_KEY"]
    deployed.LLMCHAIN_ORACLE_KEY = "0x" + "22" * 32 + "," + deployed.LLMCHAIN_ADMIN_KEY
    assert named(deployed) == ["LLMCHAIN_ORACLE_KEY"] and "the admin's key" in unsafe_settings()[0][1]
    deployed.LLMCHAIN_ORACLE_KEY = " "
    assert named(deployed) == ["LLMCHAIN_ORACLE_KEY"] and "is empty" in unsafe_settings()[0][1]


def test_a_local_development_chain_admits_anvils_keys(deployed):
    deployed.LLMCHAIN_DEV_CHAIN = True
    deployed.LLMCHAIN_ADMIN_KEY = deployed.LLMCHAIN_ORACLE_KEY = DEV_KEYS[0]
    assert named(deployed) == []


def test_production_needs_allowed_hosts(deployed):
    deployed.ALLOWED_HOSTS = []
    assert named(deployed) == ["ALLOWED_HOSTS"]

import pytest

from apps.chain.client import ChainClient, account_from_key
from apps.chain.deploy import deploy, grant_role
from apps.chain.node import DEV_KEYS, AnvilNode, anvil_available
from tests.support import Driver


def pytest_collection_modifyitems(config, items):
    if anvil_available():
        return
    skip = pytest.mark.skip(reason="anvil is not installed (run `npm ci`)")
    for item in items:
        if "chain" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def admin():
    return account_from_key(DEV_KEYS[0])


@pytest.fixture(scope="session")
def oracle():
    return account_from_key(DEV_KEYS[1])


@pytest.fixture(scope="session")
def automine_node(tmp_path_factory):
    """A free-gas anvil that mines each transaction at once: for direct contract tests."""
    node = AnvilNode(block_time=None, base_fee=0, log_file=tmp_path_factory.mktemp("anvil") / "anvil.log")
    node.start()
    yield node
    node.stop()


@pytest.fixture(scope="session")
def driver(automine_node, admin, oracle) -> Driver:
    client = ChainClient(automine_node.url)
    deployment = deploy(client, admin)
    grant_role(client, deployment, admin, "ORACLE_ROLE", oracle.address)
    return Driver(client, deployment)


@pytest.fixture
def fresh_chain(driver):
    """Each test sees the chain as deployed, whatever the previous test did."""
    snap = driver.snapshot()
    yield driver
    driver.revert_to(snap)

import pytest

from ._helpers import block_quantizer


@pytest.fixture
def e2m1_q():
    return block_quantizer("e2m1")


@pytest.fixture
def e1m2_q():
    return block_quantizer("e1m2")

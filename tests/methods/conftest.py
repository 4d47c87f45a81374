import pytest

from tests.methods.fakes import ticket_texts


@pytest.fixture
def tickets():
    return ticket_texts(160)

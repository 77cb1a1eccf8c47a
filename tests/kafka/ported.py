"""What the ports of Kafka's unit tests in ``tests/kafka/`` share.

- ``no_api(reason)``: the stand-in for an upstream test that has nothing to run against in
  kafkalog; it skips with ``no API: <reason>``. A port lists it under the upstream test's name
  (``test_force_unmap = no_api("...")``), so every upstream case has its line in the report.
- ``kernel_mode``: a fixture that runs a test once with the compiled kernels and once with
  their pure-Python twins swapped in (``twins.kernels_of``), for ports whose cases go through
  the kernels; a module takes it with ``pytestmark = pytest.mark.usefixtures("kernel_mode")``.
"""
import pytest

from twins import kernels_of


def no_api(reason):
    """An upstream test kafkalog has no API for: a test that skips, saying why."""
    def upstream_test_without_api():
        pytest.skip(f"no API: {reason}")
    return upstream_test_without_api


@pytest.fixture
def kernel_mode(kernels):
    """The test, run with ``kernels`` (conftest's fixture: each kernel module) in place."""
    with kernels_of(kernels):
        yield kernels

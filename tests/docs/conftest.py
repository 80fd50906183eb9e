"""The docs examples run against the integration tests' shared deployment fixtures."""

from tests.integration.conftest import fake, module_cluster

__all__ = ["fake", "module_cluster"]

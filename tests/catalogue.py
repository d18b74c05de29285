"""The one catalogue of cascades the tests parametrize over."""

from redalgebra import workloads

WORKLOADS = workloads.names()

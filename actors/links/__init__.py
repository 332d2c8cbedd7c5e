"""Faultable links: network partitions, slow and lossy links between kray's processes."""

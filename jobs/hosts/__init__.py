"""Hosts of their own on one machine (network, PID and mount namespaces on a bridge), for clusters
that cross a real network and faults the kernel makes."""

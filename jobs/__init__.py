"""Runnable jobs: the main demo and the `kray` command line."""

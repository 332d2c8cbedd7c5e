"""`python -m jobs.cli`: the `kray` command without its installed script."""
import sys

from jobs.cli import main

sys.exit(main())

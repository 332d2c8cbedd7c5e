"""`kray experiment`, `check`, `sweep`, `analyse` and `demo`: the commands that run kray's jobs rather
than act on a cluster. Each hands over to its job at once; `sweep` and `analyse` are listed here for
the help only, as `main` passes them on to their own parsers.
"""
from __future__ import annotations

import sys


def experiment_run(args) -> None:
    from jobs.experiments.experiment import load_experiment
    from jobs.experiments.runner import run_experiment
    from jobs.experiments.summary import report

    experiment = load_experiment(args.file)
    run_dir, summary = run_experiment(experiment, args.runs_dir)
    print(report(run_dir))
    if not summary.check.ok:
        sys.exit(1)


def check(args) -> None:
    from jobs.measures.check import main as check_main
    sys.exit(check_main([args.run_dir, "--grace-ms", str(args.grace_ms)]))


def demo(args) -> None:
    from jobs.demo import run
    run(session_timeout_ms=args.session_timeout_ms)


def add_parsers(sub, zkp) -> None:
    ex = sub.add_parser("experiment", help="chaos experiments").add_subparsers(dest="action", required=True)
    s = ex.add_parser("run", help="run an experiment file (YAML)")
    s.add_argument("file")
    s.add_argument("--runs-dir", default="runs")
    s.set_defaults(func=experiment_run)

    s = sub.add_parser("check", help="check a run directory's invariants")
    s.add_argument("run_dir")
    s.add_argument("--grace-ms", type=float, default=5000)
    s.set_defaults(func=check)

    sub.add_parser("sweep", help="a grid of experiments, then the Spark analysis (kray sweep -h)")
    sub.add_parser("analyse", help="the Spark analysis of run directories (kray analyse -h)")

    s = sub.add_parser("demo", help="a quick look: election, a topic, a controller failover")
    s.add_argument("--session-timeout-ms", type=int, default=6000)
    s.set_defaults(func=demo)

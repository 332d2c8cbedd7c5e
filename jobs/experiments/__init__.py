"""Running experiments: the declarative Experiment, the chaos actions, the schedule and the runner
that records a run directory."""

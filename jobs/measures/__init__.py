"""What a run directory says: its record files, each partition's waits, the controller's phases, the
failovers, the returning broker's rejoin, the group's failover, and the invariant checks."""

"""The analysis' outputs: Spark on Ray (RayDP), the report with its charts, and a run's timeline page."""

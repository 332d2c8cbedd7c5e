"""Everything that runs as a Ray actor, and the pure logic the actors drive."""

"""Property-based fuzzing of costspec: spec strategies (specgen), the properties (properties), the long run (run_fuzz)."""

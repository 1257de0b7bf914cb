"""`costspec validate SPEC --against TARGET`: does the spec describe the user's real model?

target: load and build the real model (user callable or transformers class, on meta);
mapping: spec rows <-> real module paths (`source:` and a best-effort automatic match);
compare: per-row spec vs real after the named rules; check: run, count and compare;
report: the comparison as a `costspec.core.results.Result`.

Importing this package imports torch (through runtime_count): only `validate --against` does.
"""

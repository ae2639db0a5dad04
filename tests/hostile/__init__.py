"""The hostile-input corpus (corpus.py): run it with `python tests/hostile/corpus.py`, or through
tests/test_hostile_corpus.py (marked slow)."""

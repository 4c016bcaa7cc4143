"""The ground floor: loading a checkpoint with one clear error and the checks on what it is loaded with
(``loading``), saving a run (``saving``) and writing its results (``results``). Every wing of the library imports
it; it imports none of them (``tests/test_layout.py`` walks the imports)."""

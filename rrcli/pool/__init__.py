"""The pool a program calls (``rrcli.Pool``): the engine in-process, one call at a time."""

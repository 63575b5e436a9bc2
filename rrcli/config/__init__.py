"""Configuration: what a profile holds and how a profile file is read and checked.

Imports point one way: ``diagnostic`` (imports nothing of rrcli's) and ``profile`` (the frozen
types) at the bottom; ``schema`` (field specs and per-field rules), ``walk`` (the walk that
applies them), ``backends`` and ``document`` (the rules across fields) above them; ``load``
(finding and reading the file) on top. ``addresses`` is the base_url address policy, the one
part that does DNS; ``starter`` writes the profile of ``rrcli init``.
"""

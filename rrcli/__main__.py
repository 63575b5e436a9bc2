"""``python -m rrcli``: the ``rrcli`` command under its own name (its usage lines, and the
``_RRCLI_COMPLETE`` variable shell completion sets)."""

from rrcli.cli import main

if __name__ == "__main__":
    main(prog_name="rrcli")

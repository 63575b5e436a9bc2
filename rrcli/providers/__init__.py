"""Provider adapters behind one small contract (see ``base.py``)."""

"""`rrcli stats`: reading traces into columns and summarising them."""
